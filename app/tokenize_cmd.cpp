// tokenize and bpe-train commands; see cli.h.
#include "app/tokenize_cmd.h"

#include <cctype>
#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "data/bpe_tokenizer.h"
#include "data/bpe_train.h"
#include "data/token_stream.h"

namespace tg::data {
namespace {

using cli::UsageError;

// One id of `tokenize --decode`'s input, the count-th.
int parse_id(const Tokenizer& tok, const std::string& word, const std::string& where, size_t count);

// The whole input: a regular file, or stdin for "-", each of at most kMaxInputBytes.
std::string slurp(const std::string& path, std::istream& in) {
  if (path == "-") return read_stream(in, "stdin", kMaxInputBytes);
  return read_regular_file(path, kMaxInputBytes, "text");
}

int parse_id(const Tokenizer& tok, const std::string& word, const std::string& where,
             size_t count) {
  const std::optional<int64_t> id = cli::parse_int(word);
  if (!id)
    throw std::runtime_error(where + ": '" + show_bytes(word) + "' is not a token id (id number " +
                             std::to_string(count) + ")");
  if (*id < 0 || *id >= tok.n_vocab())
    throw std::runtime_error(where + ": unknown token id " + word + " (id number " +
                             std::to_string(count) + "; the vocabulary has ids 0.." +
                             std::to_string(tok.n_vocab() - 1) + ")");
  return static_cast<int>(*id);
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

// The input in blocks of 1 MiB: a regular file, or stdin for "-", each of at most
// kMaxInputBytes.
constexpr size_t kBlockBytes = size_t(1) << 20;
void for_each_block(const std::string& path, std::istream& in,
                    const std::function<void(std::string_view)>& consume) {
  if (path == "-") return read_stream_blocks(in, "stdin", kMaxInputBytes, kBlockBytes, consume);
  read_regular_file_blocks(path, kMaxInputBytes, "text", kBlockBytes, consume);
}

// stdout (a shell's `>> FILE`) is the input file itself: the ids would be appended to the text
// being read.
void refuse_stdout_is(const std::string& input) {
  const std::string clash = find_clobbered({{input, "the text"}}, {{"/dev/stdout", "stdout"}});
  if (!clash.empty()) throw UsageError(clash);
}

// Output written a block at a time: an input that fails within its first MiB of output writes
// nothing (as before streaming); a closed stdout stops the command early.
class BlockWriter {
 public:
  explicit BlockWriter(std::ostream& out) : out_(out) {}
  std::string& buffer() { return buf_; }
  void maybe_write() {
    if (buf_.size() >= kBlockBytes) write();
  }
  void write() {
    out_ << buf_;
    buf_.clear();
    if (!out_) check_written(out_);
  }

 private:
  std::ostream& out_;
  std::string buf_;
};

// The ids of the text, space-separated on one line, written block by block: memory is the
// tokenizer, one block and its ids, whatever the input's size.
void encode_text(const Tokenizer& tok, bool ordinary, const std::string& input,
                 const std::string& where, std::istream& in, std::ostream& out) {
  bool any_input = false, first = true;
  BlockWriter w(out);
  TokenStream stream(tok, ordinary, [&](const std::vector<int>& ids) {
    for (const int id : ids) {  // one chunk of 100 MB gives its ids at once: written as they go
      if (!first) w.buffer() += ' ';
      w.buffer() += std::to_string(id);
      first = false;
      w.maybe_write();
    }
  });
  for_each_block(input, in, [&](std::string_view block) {
    any_input = true;
    stream.feed(block);
  });
  if (!any_input) throw std::runtime_error(where + ": empty input, nothing to tokenize");
  stream.finish();
  w.buffer() += '\n';
  w.write();
}

// Space-separated ids to their exact bytes (tokenize | tokenize --decode is lossless), block by
// block; an id cut by a block's end waits for the next.
void decode_ids(const Tokenizer& tok, const std::string& input, const std::string& where,
                std::istream& in, std::ostream& out) {
  size_t count = 0;
  std::string carry;
  std::vector<int> ids;
  BlockWriter w(out);
  auto words = [&](std::string_view text, bool last) {
    ids.clear();
    size_t i = 0;
    while (true) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      if (i == j) break;
      if (j == text.size() && !last) {  // may go on in the next block
        carry.assign(text.substr(i));
        break;
      }
      ids.push_back(parse_id(tok, std::string(text.substr(i, j - i)), where, ++count));
      i = j;
    }
    w.buffer() += tok.decode_bytes(ids);
    w.maybe_write();
  };
  for_each_block(input, in, [&](std::string_view block) {
    std::string text = std::move(carry);
    carry.clear();
    text.append(block);
    words(text, false);
  });
  const std::string rest = std::move(carry);
  words(rest, true);
  if (count == 0) throw std::runtime_error(where + ": empty input, no token ids to decode");
  w.write();
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
    const std::string input = t.input.empty() ? "-" : t.input;
    const std::string where = input == "-" ? "stdin" : input;
    // Appending the ids to the text being read would feed the reader its own output.
    if (input != "-") refuse_stdout_is(input);
    const Tokenizer tok =
        t.tokenizer_file.empty() ? Tokenizer::gpt2() : Tokenizer::load(t.tokenizer_file);
    if (t.decode) {
      decode_ids(tok, input, where, in, out);
    } else {
      encode_text(tok, t.ordinary, input, where, in, out);
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
