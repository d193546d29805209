// platforms/cortex-m/stack_guard_test.cpp: startup_guard_stack() turns a stack overflow into a
// reported fault. Recurses until the stack runs out; ctest expects a MemManage fault at an address
// inside the guard (the fault handler prints CFSR and MMFAR), and never the line after the
// recursion. The stack is first in RAM (mps2-an386.ld), so a frame larger than the guard that
// skips it runs off the start of RAM, never into .data or .bss.
#include <stdint.h>

#include "semihost.h"

namespace {

volatile uint32_t g_sink = 0;

__attribute__((noinline)) uint32_t deep(uint32_t n) {
  volatile uint8_t frame[256];
  for (uint32_t i = 0; i < sizeof frame; ++i) frame[i] = static_cast<uint8_t>(n + i);
  return n == 0 ? frame[0] : deep(n - 1) + frame[n % sizeof frame];
}

}  // namespace

int main() {
  startup_guard_stack();
  semihost_write("stack_guard: recursing past the stack\n");
  g_sink = deep(1u << 20);  // about 270 MB of frames: far more than the stack
  semihost_write("stack_guard: FAIL: the overflow was not caught\n");
  return 1;
}
