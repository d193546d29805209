// model_files.cpp: atomic, durable whole-file writes and bounded reads (POSIX).
#include "model_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace edgefl {
namespace server {
namespace {

FileFaultHook g_fault_hook;

// The injected errno for `call` on `path` (0: none; then the real call runs).
int injected(const char* call, const std::string& path) {
  return g_fault_hook ? g_fault_hook(call, path) : 0;
}

Status sys_error(std::string* error, const std::string& what, int err) {
  if (error != nullptr) *error = what + ": " + strerror(err);
  return Status::kIoError;
}

// Closes a descriptor at scope end unless release()d (then the caller closes and checks).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

bool valid_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// ".<name>.tmp-<digits>"
bool is_temp_name(const char* entry) {
  if (entry[0] != '.') return false;
  const char* tag = strstr(entry, ".tmp-");
  if (tag == nullptr || tag == entry) return false;
  // the last ".tmp-" followed only by digits
  const char* last = tag;
  while ((tag = strstr(last + 1, ".tmp-")) != nullptr) last = tag;
  const char* digits = last + 5;
  if (*digits == '\0') return false;
  for (const char* p = digits; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  return last > entry + 1;  // a non-empty name between the dot and ".tmp-"
}

}  // namespace

Status write_file_atomic(const std::string& dir, const std::string& name, Span<const uint8_t> bytes,
                         std::string* error) {
  if (dir.empty() || dir.find('\0') != std::string::npos || !valid_name(name)) {
    if (error != nullptr) *error = "write_file_atomic: bad directory or file name \"" + name + "\"";
    return Status::kInvalidArgument;
  }
  if (bytes.data() == nullptr && bytes.size() != 0) {
    if (error != nullptr) *error = "write_file_atomic: null bytes";
    return Status::kInvalidArgument;
  }
  const std::string target = join(dir, name);
  const std::string temp = join(dir, "." + name + ".tmp-" + std::to_string(long(::getpid())));

  if (const int err = injected("open", temp)) return sys_error(error, "creating " + temp, err);
  Fd file(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (file.get() < 0) return sys_error(error, "creating " + temp, errno);
  // From here on, a failure removes the temporary file.
  struct Cleanup {
    const std::string* path;
    bool armed = true;
    ~Cleanup() {
      if (armed) ::unlink(path->c_str());
    }
  } cleanup{&temp};

  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  if (const int err = injected("write", temp)) return sys_error(error, "writing " + temp, err);
  while (left > 0) {
    const ssize_t n = ::write(file.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(error, "writing " + temp, errno);
    }
    if (n == 0) return sys_error(error, "writing " + temp, EIO);
    p += n;
    left -= size_t(n);
  }
  if (const int err = injected("fsync", temp)) return sys_error(error, "fsync " + temp, err);
  if (::fsync(file.get()) != 0) return sys_error(error, "fsync " + temp, errno);
  if (const int err = injected("close", temp)) return sys_error(error, "closing " + temp, err);
  if (::close(file.release()) != 0) return sys_error(error, "closing " + temp, errno);
  if (const int err = injected("rename", target))
    return sys_error(error, "renaming " + temp + " to " + target, err);
  if (::rename(temp.c_str(), target.c_str()) != 0)
    return sys_error(error, "renaming " + temp + " to " + target, errno);
  cleanup.armed = false;

  // The rename is durable once the directory entry is.
  if (const int err = injected("open_dir", dir)) return sys_error(error, "opening directory " + dir, err);
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) return sys_error(error, "opening directory " + dir, errno);
  if (const int err = injected("fsync_dir", dir)) return sys_error(error, "fsync directory " + dir, err);
  if (::fsync(d.get()) != 0) return sys_error(error, "fsync directory " + dir, errno);
  return Status::kOk;
}

void set_file_fault_hook(FileFaultHook hook) {
  g_fault_hook = std::move(hook);
}

Status read_file(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out, std::string* error) {
  if (out == nullptr || path.empty() || path.find('\0') != std::string::npos) {
    if (error != nullptr) *error = "read_file: null output or empty path";
    return Status::kInvalidArgument;
  }
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return sys_error(error, "opening " + path, errno);
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return sys_error(error, "stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    if (error != nullptr) *error = path + " is not a regular file";
    return Status::kIoError;
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size > max_bytes) {
    if (error != nullptr) {
      *error = path + " is " + std::to_string(size) + " bytes, more than the limit of " +
               std::to_string(max_bytes);
    }
    return Status::kIoError;
  }
  std::vector<uint8_t> data;
  data.resize(size_t(size));
  size_t got = 0;
  for (;;) {
    if (got == data.size()) {
      // The file may have grown since fstat: probe one byte past the end.
      if (uint64_t(got) >= max_bytes) {
        uint8_t probe;
        const ssize_t n = ::read(file.get(), &probe, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error(error, "reading " + path, errno);
        if (n > 0) {
          if (error != nullptr)
            *error = path + " grew beyond the limit of " + std::to_string(max_bytes) + " bytes";
          return Status::kIoError;
        }
        break;
      }
      data.resize(got + size_t(std::min<uint64_t>(max_bytes - got, 1u << 16)));
    }
    const ssize_t n = ::read(file.get(), data.data() + got, data.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(error, "reading " + path, errno);
    }
    if (n == 0) break;
    got += size_t(n);
  }
  data.resize(got);
  *out = std::move(data);
  return Status::kOk;
}

Status make_directory(const std::string& dir, const std::string& name, std::string* error) {
  if (dir.empty() || name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    if (error != nullptr) *error = "make_directory: empty directory or a bad name '" + name + "'";
    return Status::kInvalidArgument;
  }
  const std::string path = join(dir, name);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return sys_error(error, "creating " + path, errno);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return sys_error(error, "stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) {
    if (error != nullptr) *error = path + " exists and is not a directory";
    return Status::kIoError;
  }
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) return sys_error(error, "opening directory " + dir, errno);
  if (::fsync(d.get()) != 0) return sys_error(error, "fsync directory " + dir, errno);
  return Status::kOk;
}

Status remove_temp_files(const std::string& dir, size_t* removed, std::string* error) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return sys_error(error, "listing " + dir, errno);
  size_t count = 0;
  Status result = Status::kOk;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    if (!is_temp_name(e->d_name)) continue;
    const std::string path = join(dir, e->d_name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      result = sys_error(error, "removing " + path, errno);
      break;
    }
    ++count;
    errno = 0;
  }
  if (result == Status::kOk && errno != 0) result = sys_error(error, "listing " + dir, errno);
  ::closedir(d);
  if (result == Status::kOk && removed != nullptr) *removed = count;
  return result;
}

}  // namespace server
}  // namespace edgefl
