// model_files.h: whole-file writes that are atomic and durable, and bounded whole-file reads, for
// the server's model versions and other state files (POSIX).
//
//   write_file_atomic(state_dir, "model-000042.safetensors", bytes, &error);  // then record_model()
//
// Order of a write: dir/.name.tmp-<pid> (created or truncated, mode 0644, never through a symlink),
// write everything, fsync, close, rename over dir/name, fsync(dir). A crash at any point leaves
// either the old dir/name or the new one, plus possibly a stale temporary file, which
// remove_temp_files() clears (call it at start-up, before any write). One writer per name: two
// threads of one process writing the same name share the temporary path.
#ifndef EDGEFL_SERVER_MODEL_FILES_H_
#define EDGEFL_SERVER_MODEL_FILES_H_

#include <stdint.h>

#include <functional>
#include <string>
#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {
namespace server {

// Writes `bytes` to dir/name atomically (see above). `name` is a plain file name (no '/', not
// "." or "..", not starting with '.', so it never collides with a temporary file). Fails:
// kInvalidArgument (a bad name, empty dir), kIoError (any system call; *error names it and
// errno's text). On failure before the rename nothing at dir/name changes and the temporary file
// is removed; if only the final fsync(dir) fails, dir/name already holds the new bytes but may not
// survive a power loss (the call still fails).
Status write_file_atomic(const std::string& dir, const std::string& name, Span<const uint8_t> bytes,
                         std::string* error);

// Reads the regular file at `path` whole into *out (replaced on kOk only). Fails: kIoError (open,
// read, not a regular file, or larger than max_bytes), kInvalidArgument (null out).
Status read_file(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out, std::string* error);

// Creates the directory dir/name (mode 0755) unless it exists, and makes its entry durable
// (fsync of dir). kInvalidArgument for a name with '/' or "." / ".."; kIoError when it cannot be
// created, or exists and is not a directory (a symlink is not one).
Status make_directory(const std::string& dir, const std::string& name, std::string* error);

// Removes the temporary files write_file_atomic leaves behind when a process dies mid-write
// (".*.tmp-<digits>" in `dir`). *removed (if non-null) gets their number. kIoError if `dir` cannot
// be listed or a file cannot be removed.
Status remove_temp_files(const std::string& dir, size_t* removed, std::string* error);

// Fault injection, for tests: write_file_atomic calls the hook before each system call, with the
// call's name ("open", "write", "fsync", "close", "rename", "open_dir", "fsync_dir") and the path
// (the temporary file; the target for "rename"; the directory for the last two). A non-zero
// return is taken as that call failing with that errno, and the write fails as the real failure
// would. An empty hook (the default) injects nothing. Not thread-safe: set it while no write runs.
using FileFaultHook = std::function<int(const char* call, const std::string& path)>;
void set_file_fault_hook(FileFaultHook hook);

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_MODEL_FILES_H_
