// The subcommands of the tapegrad binary, each `int name_main(int argc, char** argv)` with argv[0]
// the subcommand's own name. They print one clear line and return non-zero on bad input.
#pragma once

namespace tg::cli {

int chapter3_main(int argc, char** argv);  // app/chapter3.cpp
int train_main(int argc, char** argv);     // app/train_cmd.cpp
int generate_main(int argc, char** argv);  // app/train_cmd.cpp

}  // namespace tg::cli
