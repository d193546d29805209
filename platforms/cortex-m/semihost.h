// platforms/cortex-m/semihost.h: output and exit through Arm semihosting (QEMU:
// -semihosting-config enable=on,target=native), and the few formatting helpers the device
// programs need instead of printf.
#ifndef EDGEFL_PLATFORMS_CORTEX_M_SEMIHOST_H_
#define EDGEFL_PLATFORMS_CORTEX_M_SEMIHOST_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Writes a NUL-terminated string to the host's console (SYS_WRITE0).
void semihost_write(const char* text);
// Host files (QEMU's semihosting opens them on the host): SYS_OPEN with an fopen() mode index
// (0 = "r", 1 = "rb"), returning a handle or -1; SYS_READ, returning the bytes read (0 at the end
// or on an error); SYS_CLOSE.
int semihost_open(const char* path, int mode);
size_t semihost_read(int handle, void* buffer, size_t length);
void semihost_close(int handle);
// Ends the program with `code` as QEMU's exit status (SYS_EXIT_EXTENDED). Never returns.
__attribute__((noreturn)) void semihost_exit(int code);

// Stack use so far: bytes of the stack region (linker script) ever written, found by the pattern
// startup.c paints below the stack pointer before main().
size_t startup_stack_high_water(void);
// Makes the lowest 32 bytes of the stack read-only through the MPU: a stack overflow then ends the
// program with "cortex-m: fault" instead of overwriting .bss below the stack.
void startup_guard_stack(void);
size_t startup_stack_size(void);

#ifdef __cplusplus
}

// A line assembled piece by piece, then written at once.
class Line {
 public:
  Line& operator<<(const char* s) {
    while (*s && len_ + 1 < sizeof buf_) buf_[len_++] = *s++;
    buf_[len_] = '\0';
    return *this;
  }
  Line& operator<<(unsigned long v) {
    char tmp[24];
    int i = 0;
    do tmp[i++] = char('0' + v % 10);
    while ((v /= 10) != 0);
    while (i > 0 && len_ + 1 < sizeof buf_) buf_[len_++] = tmp[--i];
    buf_[len_] = '\0';
    return *this;
  }
  Line& hex(uint32_t v) {
    static const char kDigits[] = "0123456789abcdef";
    *this << "0x";
    for (int shift = 28; shift >= 0; shift -= 4) {
      if (len_ + 1 < sizeof buf_) buf_[len_++] = kDigits[(v >> shift) & 0xF];
    }
    buf_[len_] = '\0';
    return *this;
  }
  void print() {
    *this << "\n";
    semihost_write(buf_);
    len_ = 0;
    buf_[0] = '\0';
  }

 private:
  char buf_[160] = {};
  size_t len_ = 0;
};
#endif

#endif  // EDGEFL_PLATFORMS_CORTEX_M_SEMIHOST_H_
