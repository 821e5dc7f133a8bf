// tokenize and bpe-train commands; see cli.h.
#include "data/cli.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/bpe_train.h"

namespace tg::data {
namespace {

constexpr char kTokenizeUsage[] =
    "usage: tapegrad tokenize [--encoding gpt2 | --tokenizer FILE] [--decode] [--ordinary] "
    "[FILE|-]\n"
    "  Prints the token ids of FILE (or stdin) separated by spaces; --decode reads ids and "
    "writes the text.\n"
    "  <|endoftext|> in the text is the special token unless --ordinary is given.\n";
constexpr char kTrainUsage[] =
    "usage: tapegrad bpe-train --vocab-size N -o FILE [--special TOKEN]... "
    "[--format tapegrad|tiktoken] TEXT\n"
    "  Trains a byte-level BPE vocabulary of N tokens (N >= 256, specials extra) on TEXT.\n";

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole input: a file, or stdin for "-".
std::string slurp(const std::string& path, std::istream& in) {
  std::ostringstream ss;
  if (path == "-") {
    ss << in.rdbuf();
    return ss.str();
  }
  if (std::filesystem::is_directory(path)) throw std::runtime_error(path + ": is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error(
        path + (std::filesystem::exists(path) ? ": cannot open for reading" : ": no such file"));
  ss << f.rdbuf();
  if (f.bad()) throw std::runtime_error(path + ": read error");
  return ss.str();
}

// Value of option argv[i] ("--x VALUE"); advances i.
std::string value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw Usage(std::string("option ") + argv[i] + " needs a value");
  return argv[++i];
}

bool parse_int(const std::string& s, long long& v) {
  if (s.empty() || s.size() > 12) return false;
  size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (...) {
    return false;
  }
  return used == s.size();
}

int run(const char* cmd, const char* usage, std::ostream& err, const auto& body) {
  try {
    return body();
  } catch (const Usage& e) {
    err << "tapegrad " << cmd << ": " << e.what() << " (try --help)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "tapegrad " << cmd << ": " << e.what() << "\n";
    return 1;
  }
  (void)usage;
}

}  // namespace

int tokenize_main(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  return run("tokenize", kTokenizeUsage, err, [&]() -> int {
    std::string encoding, tokenizer_file, input;
    bool decode = false, ordinary = false, have_input = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        out << kTokenizeUsage;
        return 0;
      } else if (a == "--encoding") {
        encoding = value(argc, argv, i);
      } else if (a == "--tokenizer") {
        tokenizer_file = value(argc, argv, i);
      } else if (a == "--decode") {
        decode = true;
      } else if (a == "--ordinary") {
        ordinary = true;
      } else if (a.size() > 1 && a[0] == '-') {
        throw Usage("unknown option '" + a + "'");
      } else if (have_input) {
        throw Usage("more than one input file ('" + input + "' and '" + a + "')");
      } else {
        input = a, have_input = true;
      }
    }
    if (!encoding.empty() && !tokenizer_file.empty())
      throw Usage("give either --encoding or --tokenizer, not both");
    if (!encoding.empty() && encoding != "gpt2")
      throw Usage("unknown encoding '" + encoding + "' (only gpt2 is built in)");
    const Tokenizer tok =
        tokenizer_file.empty() ? Tokenizer::gpt2() : Tokenizer::load(tokenizer_file);
    const std::string text = slurp(have_input ? input : "-", in);
    const std::string where = have_input && input != "-" ? input : "stdin";
    if (decode) {
      std::istringstream ids_in(text);
      std::vector<int> ids;
      std::string word;
      while (ids_in >> word) {
        long long id;
        if (!parse_int(word, id))
          throw std::runtime_error(where + ": '" + show_bytes(word) +
                                   "' is not a token id (id number " +
                                   std::to_string(ids.size() + 1) + ")");
        if (id < 0 || id >= tok.n_vocab())
          throw std::runtime_error(where + ": unknown token id " + word + " (id number " +
                                   std::to_string(ids.size() + 1) + "; the vocabulary has ids 0.." +
                                   std::to_string(tok.n_vocab() - 1) + ")");
        ids.push_back(static_cast<int>(id));
      }
      if (ids.empty()) throw std::runtime_error(where + ": empty input, no token ids to decode");
      out << tok.decode_bytes(ids);  // exact bytes: tokenize | tokenize --decode is lossless
    } else {
      if (text.empty()) throw std::runtime_error(where + ": empty input, nothing to tokenize");
      const std::vector<int> ids =
          ordinary ? tok.encode_ordinary(text) : tok.encode(text, SpecialSet::All());
      std::string line;
      for (size_t k = 0; k < ids.size(); ++k) {
        if (k) line += ' ';
        line += std::to_string(ids[k]);
      }
      out << line << '\n';
    }
    out.flush();
    if (!out) throw std::runtime_error("cannot write the output");
    return 0;
  });
}

int bpe_train_main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  return run("bpe-train", kTrainUsage, err, [&]() -> int {
    long long vocab_size = -1;
    std::string output, input, format = "tapegrad";
    std::vector<std::string> specials;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        out << kTrainUsage;
        return 0;
      } else if (a == "--vocab-size") {
        const std::string v = value(argc, argv, i);
        if (!parse_int(v, vocab_size) || vocab_size < 256 || vocab_size > 1000000)
          throw Usage("--vocab-size must be an integer in 256..1000000, got '" + v + "'");
      } else if (a == "-o" || a == "--output") {
        output = value(argc, argv, i);
      } else if (a == "--special") {
        specials.push_back(value(argc, argv, i));
        if (specials.back().empty()) throw Usage("--special needs a non-empty token");
      } else if (a == "--format") {
        format = value(argc, argv, i);
        if (format != "tapegrad" && format != "tiktoken")
          throw Usage("unknown --format '" + format + "' (tapegrad or tiktoken)");
      } else if (a.size() > 1 && a[0] == '-') {
        throw Usage("unknown option '" + a + "'");
      } else if (!input.empty()) {
        throw Usage("more than one TEXT file ('" + input + "' and '" + a + "')");
      } else {
        input = a;
      }
    }
    if (vocab_size < 0) throw Usage("missing --vocab-size N");
    if (output.empty()) throw Usage("missing -o FILE");
    if (input.empty()) throw Usage("missing the TEXT file to train on");
    const std::string text = slurp(input, std::cin);
    if (text.empty()) throw std::runtime_error(input + ": empty input, nothing to train on");
    const auto t0 = std::chrono::steady_clock::now();
    BpeTrainStats st;
    const Tokenizer tok = bpe_train(text, static_cast<int>(vocab_size), specials, &st);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (format == "tiktoken") {
      tok.save_tiktoken(output);
    } else {
      tok.save(output);
    }
    out << "bpe-train: " << st.merges << " merges from " << text.size() << " bytes (" << st.chunks
        << " chunks, " << st.unique_chunks << " distinct) in " << secs << " s -> " << output
        << "\n";
    if (256 + st.merges < static_cast<size_t>(vocab_size))
      err << "bpe-train: warning: the text ran out of pairs; the vocabulary has " << 256 + st.merges
          << " tokens, not " << vocab_size << "\n";
    return 0;
  });
}

int tokenize_main(int argc, char** argv) {
  return tokenize_main(argc, argv, std::cin, std::cout, std::cerr);
}
int bpe_train_main(int argc, char** argv) {
  return bpe_train_main(argc, argv, std::cout, std::cerr);
}

}  // namespace tg::data
