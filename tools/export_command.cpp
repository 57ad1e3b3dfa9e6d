// zenflow-run export: a checkpoint written by --checkpoint-dir as a Hugging Face directory, without
// training. The run is rebuilt from the spec the checkpoint holds (its model directory and data
// files must still be where that spec says), resumed, the updates still in flight applied as at
// the end of the run (ZenFlow's overlapped host update), and written as --save-hf writes it: the
// same bytes as --save-hf at the end of the run that wrote the checkpoint.
#include "tools/export_command.hpp"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <sstream>

#include "graphs/schema/spec.hpp"
#include "graphs/train/checkpoint.hpp"
#include "graphs/train/trainer.hpp"
#include "models/hf/save.hpp"
#include "runtime/error.hpp"
#include "tools/cli_checks.hpp"

namespace zf::tools {

namespace {

namespace fs = std::filesystem;

struct ExportArgs {
  std::string resume, save_hf, save_dtype;
  bool quiet = false;
};

int export_checkpoint(const ExportArgs& a) {
  const CheckpointInfo ck = find_checkpoint(a.resume);
  const std::string state = ck.dir + "/state.safetensors";
  const Spec s = parse_spec(ck.spec, state + ": spec");
  if (s.model.type != "hf")
    throw InputError("--resume " + a.resume, "the checkpoint is of a model.type " + s.model.type +
                                                 " model; export writes Hugging Face models (model.type hf). Its "
                                                 "weights load with --init " + ck.dir + "/model.safetensors");
  if (!a.save_dtype.empty()) (void)hf::save_dtype(a.save_dtype, "--save-dtype");
  std::error_code ec;
  if (fs::exists(a.save_hf, ec) && !(fs::is_directory(a.save_hf, ec) && fs::is_empty(a.save_hf, ec)))
    throw InputError("--save-hf " + a.save_hf, "exists and is not an empty directory (nothing is overwritten)");
  std::ostringstream quiet_out;  // the resumed run's own lines
  RunOptions o;
  o.quiet = true;
  o.resume_path = a.resume;
  o.save_hf_dir = a.save_hf;
  o.save_dtype = a.save_dtype;
  o.out = &quiet_out;
  run_export(s, o);
  if (!a.quiet)
    std::cout << "export: " << ck.dir << " (step " << ck.step << " of " << s.name << ", model " << s.model.path
              << ") -> " << a.save_hf << " (tensors in " << (a.save_dtype.empty() ? "the input's dtypes" : a.save_dtype)
              << ")\n";
  return 0;
}

}  // namespace

int export_main(int argc, char** argv) {
  CLI::App app{"zenflow-run export --resume CKPT --save-hf OUT [--save-dtype f32|bf16|f16]\n"
               "A checkpoint written by --checkpoint-dir (CKPT: the directory, its latest step, or one step\n"
               "directory) as a Hugging Face model directory, without training: the run is rebuilt from the\n"
               "spec in the checkpoint (its model directory and data files must still be there), the updates\n"
               "in flight applied as at the end of a run, and the model written as --save-hf writes it\n"
               "(config.json and tokenizer files from the model directory; docs/finetune.md).",
               "zenflow-run export"};
  ExportArgs a;
  app.add_option("--resume", a.resume, "checkpoint DIR (its latest step) or one step directory")->required();
  app.add_option("--save-hf", a.save_hf, "output directory, new or empty (config.json, model.safetensors or "
                                         "shards, tokenizer files)")->required();
  app.add_option("--save-dtype", a.save_dtype, "f32, bf16 or f16 (default: each tensor's dtype in the input "
                                               "directory, f32 for model.init random)");
  app.add_flag("--quiet,-q", a.quiet, "no summary line");
  return parse_and_run(app, argc, argv, "export", [&] { return export_checkpoint(a); });
}

}  // namespace zf::tools
