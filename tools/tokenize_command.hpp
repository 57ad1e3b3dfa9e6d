// `zenflow-run tokenize --model DIR --text FILE --out FILE.bin`: a text file to a token file with
// the model directory's tokenizer (docs/tokenizers.md).
#pragma once

namespace zf::tools {

// argv[0] is "tokenize". Exit codes as zenflow-run's: 0, 2 bad input, 1 a failure.
int tokenize_main(int argc, char** argv);

}  // namespace zf::tools
