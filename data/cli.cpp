// tokenize and bpe-train commands; see cli.h.
#include "data/cli.h"

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/file_io.h"
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

using Usage = UsageError;

// The whole input: a regular file, or stdin for "-", each of at most kMaxInputBytes.
std::string slurp(const std::string& path, std::istream& in) {
  if (path == "-") return read_stream(in, "stdin", kMaxInputBytes);
  return read_regular_file(path, kMaxInputBytes, "text");
}

// Value of option argv[i] ("--x VALUE"); advances i.
std::string value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw Usage(std::string("option ") + argv[i] + " needs a value");
  return argv[++i];
}

// Options that take one value may be given once: a second would silently win.
void once(bool& seen, const std::string& option) {
  if (seen) throw Usage("option " + option + " is given twice");
  seen = true;
}

// -h or --help anywhere: the usage, whatever else the line holds.
bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help") return true;
  return false;
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

int run(const char* cmd, std::ostream& err, const auto& body) {
  try {
    return body();
  } catch (const Usage& e) {
    err << "tapegrad " << cmd << ": " << e.what() << " (try --help)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "tapegrad " << cmd << ": " << e.what() << "\n";
    return 1;
  }
}

// Lost output (a full disk, a closed pipe) fails the command.
void check_written(std::ostream& out) {
  out.flush();
  if (!out)
    throw std::runtime_error("cannot write the output to stdout (disk full or pipe closed?)");
}

// --help: the usage on stdout, which must be written.
int print_usage(std::ostream& out, const char* usage) {
  out << usage;
  check_written(out);
  return 0;
}

}  // namespace

TokenizeArgs parse_tokenize_args(int argc, char** argv) {
  TokenizeArgs t;
  t.help = wants_help(argc, argv);
  if (t.help) return t;
  bool have_input = false, seen_enc = false, seen_tok = false, seen_dec = false, seen_ord = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--encoding") {
      once(seen_enc, a);
      t.encoding = value(argc, argv, i);
    } else if (a == "--tokenizer") {
      once(seen_tok, a);
      t.tokenizer_file = value(argc, argv, i);
      if (t.tokenizer_file.empty()) throw Usage("--tokenizer needs a file name");
    } else if (a == "--decode") {
      once(seen_dec, a);
      t.decode = true;
    } else if (a == "--ordinary") {
      once(seen_ord, a);
      t.ordinary = true;
    } else if (a.size() > 1 && a[0] == '-') {
      throw Usage("unknown option '" + show_bytes(a) + "'");
    } else if (have_input) {
      throw Usage("more than one input file ('" + show_bytes(t.input) + "' and '" + show_bytes(a) +
                  "')");
    } else if (a.empty()) {
      throw Usage("empty input file name");
    } else {
      t.input = a, have_input = true;
    }
  }
  if (!t.encoding.empty() && !t.tokenizer_file.empty())
    throw Usage("give either --encoding or --tokenizer, not both");
  if (seen_enc && t.encoding != "gpt2")
    throw Usage("unknown encoding '" + show_bytes(t.encoding) + "' (only gpt2 is built in)");
  return t;
}

BpeTrainArgs parse_bpe_train_args(int argc, char** argv) {
  BpeTrainArgs t;
  t.help = wants_help(argc, argv);
  if (t.help) return t;
  bool seen_vocab = false, seen_out = false, seen_format = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--vocab-size") {
      once(seen_vocab, a);
      const std::string v = value(argc, argv, i);
      if (!parse_int(v, t.vocab_size) || t.vocab_size < 256 || t.vocab_size > 1000000)
        throw Usage("--vocab-size must be an integer in 256..1000000, got '" + show_bytes(v) + "'");
    } else if (a == "-o" || a == "--output") {
      once(seen_out, "-o");
      t.output = value(argc, argv, i);
      if (t.output.empty()) throw Usage("-o needs a file name");
    } else if (a == "--special") {
      const std::string sp = value(argc, argv, i);
      if (sp.empty()) throw Usage("--special needs a non-empty token");
      // The vocabulary file holds one token per line.
      if (sp.find_first_of("\r\n") != std::string::npos)
        throw Usage("--special '" + show_bytes(sp) + "' contains a line break");
      for (const std::string& s : t.specials)
        if (s == sp) throw Usage("--special '" + show_bytes(sp) + "' is given twice");
      t.specials.push_back(sp);
    } else if (a == "--format") {
      once(seen_format, a);
      t.format = value(argc, argv, i);
      if (t.format != "tapegrad" && t.format != "tiktoken")
        throw Usage("unknown --format '" + show_bytes(t.format) + "' (tapegrad or tiktoken)");
    } else if (a.size() > 1 && a[0] == '-') {
      throw Usage("unknown option '" + show_bytes(a) + "'");
    } else if (!t.input.empty()) {
      throw Usage("more than one TEXT file ('" + show_bytes(t.input) + "' and '" + show_bytes(a) +
                  "')");
    } else if (a.empty()) {
      throw Usage("empty TEXT file name");
    } else {
      t.input = a;
    }
  }
  if (t.vocab_size < 0) throw Usage("missing --vocab-size N");
  if (t.output.empty()) throw Usage("missing -o FILE");
  if (t.input.empty()) throw Usage("missing the TEXT file to train on");
  return t;
}

int tokenize_main(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  return run("tokenize", err, [&]() -> int {
    const TokenizeArgs t = parse_tokenize_args(argc, argv);
    if (t.help) return print_usage(out, kTokenizeUsage);
    const bool have_input = !t.input.empty();
    const std::string& input = t.input;
    const bool decode = t.decode, ordinary = t.ordinary;
    const Tokenizer tok =
        t.tokenizer_file.empty() ? Tokenizer::gpt2() : Tokenizer::load(t.tokenizer_file);
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
    check_written(out);
    return 0;
  });
}

int bpe_train_main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  return run("bpe-train", err, [&]() -> int {
    const BpeTrainArgs t = parse_bpe_train_args(argc, argv);
    if (t.help) return print_usage(out, kTrainUsage);
    const long long vocab_size = t.vocab_size;
    const std::string &output = t.output, &input = t.input, &format = t.format;
    const std::vector<std::string>& specials = t.specials;
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
    check_written(out);
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
