#pragma once
// `trial-worker --fork-server --objective lm --config JSON`: the fork server of one lm study, the
// server's side of proto/README.md's "Fork server protocol".
//
// Once, in the server: LibTorch initialised (one tiny CPU operation, so its lazy set-up is done;
// never CUDA, and no parallel operation, so no thread pool starts), config.json parsed, the
// checkpoint mapped read-only and validated, the tokenizer files parsed and the train and eval
// texts tokenized (LoadLmInputs). Then, for each fork request, a child that is exactly what
// `trial-worker --objective lm --config JSON` would be once it had read those inputs: it builds
// its own model from the mapping (shared copy-on-write with the server and the other trials),
// chooses its device, seeds, makes its optimizer and trains, with the same report lines, exit
// codes and SIGTERM handling as an exec'd trial (worker/trial_main.h).
//
// OpenBLAS (Debian's LibTorch uses it) starts its threads when it loads, before main(): when the
// environment does not set OPENBLAS_NUM_THREADS and OpenBLAS runs more than one thread, the
// server executes itself again with OPENBLAS_NUM_THREADS=1 (triald starts it with that set, so
// it need not), and each trial gives OpenBLAS and LibTorch's intra-op pool back the sizes an
// exec'd trial with the trial's environment would have.
//
// Thread-safety: RunForkServer owns the process (signal dispositions, descriptors, fork) and
// returns only to exit; call it from main() alone.

#include <string>
#include <vector>

namespace triald::worker {

struct TrialCommand;  // worker/trial_main.h

// Serves fork requests on the descriptor TRIALD_FORK_SERVER_FD until stop or EOF. Returns the
// exit code: 0 after stop, EOF or a failed safety check ("unsafe" sent); 1 when the set-up
// failed ("error" sent when the channel is usable; the message goes to stderr too); 2 after a
// malformed packet. `argv` is main()'s, for the re-execution described above. A forked trial
// never returns from here: it exits with its trial's code.
int RunForkServer(const TrialCommand& command, int argc, char** argv);

// Why forking this process now would be unsafe, or "" when it is safe: a thread other than the
// calling one ("2 threads", counted in /proc/self/task), a descriptor other than 0, 1, 2 and
// `allowed` ("descriptor 7 (/data/x.bin) is open", from /proc/self/fd), or CUDA initialised
// ("CUDA is initialised"; judged without initialising it: the driver library is looked up only if
// it is already loaded, and asked whether it was initialised).
std::string ForkSafetyProblem(const std::vector<int>& allowed);

}  // namespace triald::worker
