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

using cli::UsageError;

// The whole input: a regular file, or stdin for "-", each of at most kMaxInputBytes.
std::string slurp(const std::string& path, std::istream& in) {
  if (path == "-") return read_stream(in, "stdin", kMaxInputBytes);
  return read_regular_file(path, kMaxInputBytes, "text");
}

int run(const char* cmd, std::ostream& err, const auto& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    err << "tapegrad " << cmd << ": " << e.what() << "\n";
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
int print_usage(std::ostream& out, const std::string& usage) {
  out << usage;
  check_written(out);
  return 0;
}

// bpe_train, whose refusals (a token too long) name the text's file.
Tokenizer train_or_name_the_text(const std::string& text, int vocab_size,
                                 const std::vector<std::string>& specials, BpeTrainStats& st,
                                 const std::string& input) {
  try {
    return bpe_train(text, vocab_size, specials, &st);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error((input == "-" ? "stdin" : input) + ": " + e.what());
  }
}

}  // namespace

const cli::Command<TokenizeArgs>& tokenize_command() {
  using A = TokenizeArgs;
  static const cli::Command<A> c{
      "tapegrad tokenize [--encoding gpt2 | --tokenizer FILE] [--decode] [--ordinary] [FILE|-]",
      "Prints the token ids of FILE (or stdin) separated by spaces; --decode reads ids and writes\n"
      "the text. <|endoftext|> in the text is the special token unless --ordinary is given.",
      {
          cli::choice("encoding", &A::encoding, {"gpt2"}, "a built-in encoding (as tiktoken's)")
              .shown_default("gpt2"),
          cli::path("tokenizer", &A::tokenizer_file, "FILE",
                    "a vocabulary written by bpe-train instead"),
          cli::flag("decode", &A::decode, "read token ids, write the text"),
          cli::flag("ordinary", &A::ordinary, "<|endoftext|> in the text is plain text"),
      },
      cli::path("input file", &A::input, "FILE|-", "the text (or ids); - or none: stdin")};
  return c;
}

TokenizeArgs parse_tokenize_args(int argc, char** argv) {
  TokenizeArgs t;
  t.help = cli::parse(tokenize_command(), argc, argv, t).help;
  if (!t.encoding.empty() && !t.tokenizer_file.empty())
    throw UsageError("give either --encoding or --tokenizer, not both");
  return t;
}

namespace {

// The vocabulary file holds one token per line.
const char* line_break(const std::string& token) {
  return token.find_first_of("\r\n") != std::string::npos ? "contains a line break" : nullptr;
}

}  // namespace

const cli::Command<BpeTrainArgs>& bpe_train_command() {
  using A = BpeTrainArgs;
  static const cli::Command<A> c{
      "tapegrad bpe-train --vocab-size N -o FILE [--special TOKEN]... [--format tapegrad|tiktoken] "
      "TEXT",
      "Trains a byte-level BPE vocabulary of N tokens (specials extra) on TEXT.",
      {
          cli::integer("vocab-size", &A::vocab_size, 256, 1000000, "N", "tokens, bytes included")
              .required(),
          cli::path("output", &A::output, "FILE", "the vocabulary, written atomically")
              .short_name('o')
              .required(),
          cli::list("special", &A::specials, "TOKEN", "a special token (may repeat)")
              .check(line_break),
          cli::choice("format", &A::format, {"tapegrad", "tiktoken"}, "the vocabulary's format"),
      },
      cli::path("TEXT file", &A::input, "TEXT", "the text to train on").required()};
  return c;
}

BpeTrainArgs parse_bpe_train_args(int argc, char** argv) {
  BpeTrainArgs t;
  t.help = cli::parse(bpe_train_command(), argc, argv, t).help;
  return t;
}

int tokenize_main(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  return run("tokenize", err, [&]() -> int {
    const TokenizeArgs t = parse_tokenize_args(argc, argv);
    if (t.help) return print_usage(out, cli::help_text(tokenize_command()));
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
        const std::optional<int64_t> parsed = cli::parse_int(word);
        if (!parsed)
          throw std::runtime_error(where + ": '" + show_bytes(word) +
                                   "' is not a token id (id number " +
                                   std::to_string(ids.size() + 1) + ")");
        const int64_t id = *parsed;
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
    if (t.help) return print_usage(out, cli::help_text(bpe_train_command()));
    const int64_t vocab_size = t.vocab_size;
    const std::string &output = t.output, &input = t.input, &format = t.format;
    const std::vector<std::string>& specials = t.specials;
    const std::string clash = find_clobbered({{input, "the text"}}, {{output, "-o"}});
    if (!clash.empty()) throw UsageError(clash);
    const std::string text = slurp(input, std::cin);
    if (text.empty()) throw std::runtime_error(input + ": empty input, nothing to train on");
    const auto t0 = std::chrono::steady_clock::now();
    BpeTrainStats st;
    const Tokenizer tok = train_or_name_the_text(text, int(vocab_size), specials, st, input);
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
