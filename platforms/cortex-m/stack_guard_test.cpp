// platforms/cortex-m/stack_guard_test.cpp: startup_guard_stack() turns a stack overflow into a
// reported fault. Recurses until the stack runs out; ctest expects "cortex-m: fault" and never the
// line after the recursion.
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
