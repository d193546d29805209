#include "file_io.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

namespace edgefl {
namespace cli {

namespace {

std::string errno_text(int err) {
  return err != 0 ? std::string(strerror(err)) : std::string("I/O error");
}

}  // namespace

bool read_file_bytes(const std::string& path, size_t max_bytes, std::vector<uint8_t>* bytes,
                     std::string* error) {
  bytes->clear();
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = path + ": cannot open: " + errno_text(errno);
    return false;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    *error = path + ": cannot stat: " + errno_text(errno);
    fclose(f);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = path + ": not a regular file";
    fclose(f);
    return false;
  }
  if (st.st_size < 0 || static_cast<unsigned long long>(st.st_size) > max_bytes) {
    *error = path + ": file is " + std::to_string(static_cast<long long>(st.st_size)) +
             " bytes, more than the " + std::to_string(max_bytes) + " bytes accepted";
    fclose(f);
    return false;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  bytes->resize(size);
  size_t got = size == 0 ? 0 : fread(bytes->data(), 1, size, f);
  const bool read_error = ferror(f) != 0;
  // The file may have grown since fstat: anything past `size` is ignored only if there is none.
  const bool more = !read_error && fgetc(f) != EOF;
  fclose(f);
  if (read_error || got != size) {
    *error = path + ": read failed after " + std::to_string(got) + " of " + std::to_string(size) + " bytes";
    bytes->clear();
    return false;
  }
  if (more) {
    *error = path + ": file changed while it was read";
    bytes->clear();
    return false;
  }
  return true;
}

bool write_file_bytes(const std::string& path, const uint8_t* bytes, size_t size, std::string* error) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) {
    *error = path + ": cannot create: " + errno_text(errno);
    return false;
  }
  // Only a regular file is removed after a failed write (never a device such as /dev/full).
  struct stat st;
  const bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
  size_t put = size == 0 ? 0 : fwrite(bytes, 1, size, f);
  int write_errno = put != size ? errno : 0;
  if (fflush(f) != 0 && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
  const bool close_failed = fclose(f) != 0;
  if (close_failed && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
  if (put != size || write_errno != 0) {
    *error = path + ": write failed: " + errno_text(write_errno);
    if (regular) remove(path.c_str());  // a partial file would look like a valid, shorter one
    return false;
  }
  return true;
}

std::string path_basename(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;
  const size_t slash = path.rfind('/', end == 0 ? 0 : end - 1);
  if (slash == std::string::npos) return path.substr(0, end);
  if (slash + 1 >= end) return path.substr(0, end);
  return path.substr(slash + 1, end - slash - 1);
}

}  // namespace cli
}  // namespace edgefl
