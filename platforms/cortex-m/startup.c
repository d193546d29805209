// platforms/cortex-m/startup.c: the minimal runtime of the Cortex-M programs (MPS2 AN386 under
// QEMU, or any Cortex-M4F with mps2-an386.ld adapted): the vector table, the reset handler (FPU
// on, .data copied, .bss zeroed, stack painted, constructors run, main() called), fault handlers
// that report and exit, and semihosting. No newlib start files, no syscalls, no heap.
#include <stdint.h>

#include "semihost.h"

extern uint32_t __data_load__[], __data_start__[], __data_end__[], __bss_start__[], __bss_end__[];
extern uint32_t __stack_limit__[], __stack_top__[];
extern void (*__init_array_start__[])(void);
extern void (*__init_array_end__[])(void);

int main(void);
void Reset_Handler(void);
void reset_c(void);
void fault_handler(void);
static void fault_entry(void);

#define STACK_PAINT 0xC0FFEE11u

// Semihosting: r0 = operation, r1 = argument, `bkpt 0xAB` on M-profile.
static int semihost_call(int op, const void* arg) {
  register int r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void semihost_write(const char* text) {
  semihost_call(0x04, text);
}  // SYS_WRITE0

int semihost_open(const char* path, int mode) {
  size_t length = 0;
  while (path[length] != '\0') ++length;
  const uint32_t block[3] = {(uint32_t)(uintptr_t)path, (uint32_t)mode, (uint32_t)length};
  return semihost_call(0x01, block);  // SYS_OPEN: a handle, or -1
}

size_t semihost_read(int handle, void* buffer, size_t length) {
  const uint32_t block[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buffer, (uint32_t)length};
  const int not_read = semihost_call(0x06, block);  // SYS_READ: the bytes NOT read
  return (not_read < 0 || (size_t)not_read > length) ? 0 : length - (size_t)not_read;
}

void semihost_close(int handle) {
  const uint32_t block[1] = {(uint32_t)handle};
  semihost_call(0x02, block);  // SYS_CLOSE
}

void semihost_exit(int code) {
  // SYS_EXIT_EXTENDED: {ADP_Stopped_ApplicationExit, status}; QEMU exits with that status.
  const uint32_t block[2] = {0x20026u, (uint32_t)code};
  semihost_call(0x20, block);
  for (;;) {
  }
}

size_t startup_stack_size(void) {
  return (size_t)((uintptr_t)__stack_top__ - (uintptr_t)__stack_limit__);
}

size_t startup_stack_high_water(void) {
  const uint32_t* p = __stack_limit__;
  while (p < __stack_top__ && *p == STACK_PAINT) ++p;
  return (size_t)((uintptr_t)__stack_top__ - (uintptr_t)p);
}

// The first instructions: the FPU (CP10, CP11: full access in CPACR) must be on before any code
// that the compiler may give a floating-point instruction, so this part is assembly.
__attribute__((naked, noreturn)) void Reset_Handler(void) {
  __asm__ volatile(
      "ldr r0, =0xE000ED88\n"  // CPACR
      "ldr r1, [r0]\n"
      "orr r1, r1, #(0xF << 20)\n"
      "str r1, [r0]\n"
      "dsb\n"
      "isb\n"
      "b reset_c\n");
}

void reset_c(void) {
  for (uint32_t *src = __data_load__, *dst = __data_start__; dst < __data_end__;) *dst++ = *src++;
  for (uint32_t* dst = __bss_start__; dst < __bss_end__;) *dst++ = 0;
  // Paint the stack below the current frame (64 bytes of margin) for startup_stack_high_water().
  uint32_t* sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  for (uint32_t* p = __stack_limit__; p < sp - 16; ++p) *p = STACK_PAINT;
  for (void (**f)(void) = __init_array_start__; f < __init_array_end__; ++f) (*f)();
  semihost_exit(main());
}

// The fault handlers start on a fresh stack: a fault may come from a stack overflow, with SP in
// the guard region (startup_guard_stack), where nothing more can be pushed.
__attribute__((naked, noreturn)) static void fault_entry(void) {
  __asm__ volatile(
      "ldr r0, =__stack_top__\n"
      "msr msp, r0\n"
      "isb\n"
      "b fault_handler\n");
}

void startup_guard_stack(void) {
  volatile uint32_t* const mpu_rnr = (volatile uint32_t*)0xE000ED98u;
  volatile uint32_t* const mpu_rbar = (volatile uint32_t*)0xE000ED9Cu;
  volatile uint32_t* const mpu_rasr = (volatile uint32_t*)0xE000EDA0u;
  volatile uint32_t* const mpu_ctrl = (volatile uint32_t*)0xE000ED94u;
  volatile uint32_t* const shcsr = (volatile uint32_t*)0xE000ED24u;
  *mpu_rnr = 0;
  *mpu_rbar = (uint32_t)(uintptr_t)__stack_limit__;  // 32-byte aligned (mps2-an386.ld)
  // ENABLE, SIZE = 4 (2^(4+1) = 32 bytes), AP = 0b110 (read-only: the stack high-water scan reads
  // it), XN.
  *mpu_rasr = (1u << 28) | (6u << 24) | (4u << 1) | 1u;
  *shcsr |= 1u << 16;          // MemManage faults reported as such
  *mpu_ctrl = (1u << 2) | 1u;  // the default memory map elsewhere (PRIVDEFENA), MPU on
  __asm__ volatile("dsb\nisb" ::: "memory");
}

// "name=0x????????" into out (20 bytes with the NUL).
static void hex_field(char* out, const char* name, uint32_t v) {
  static const char kDigits[] = "0123456789abcdef";
  while (*name) *out++ = *name++;
  *out++ = '=';
  *out++ = '0';
  *out++ = 'x';
  for (int shift = 28; shift >= 0; shift -= 4) *out++ = kDigits[(v >> shift) & 0xF];
  *out = '\0';
}

// Reports the fault status (CFSR: MemManage bits 0-7, BusFault 8-15, UsageFault 16-31; MMFAR and
// BFAR, the faulting addresses when CFSR says they are valid) and ends the program.
void fault_handler(void) {
  semihost_write("cortex-m: fault (HardFault, MemManage, BusFault or UsageFault)\n");
  char field[24];
  hex_field(field, "cortex-m: CFSR", *(volatile uint32_t*)0xE000ED28u);
  semihost_write(field);
  hex_field(field, " MMFAR", *(volatile uint32_t*)0xE000ED34u);
  semihost_write(field);
  hex_field(field, " BFAR", *(volatile uint32_t*)0xE000ED38u);
  semihost_write(field);
  semihost_write("\n");
  semihost_exit(99);
}

static void default_handler(void) {
  semihost_write("cortex-m: unexpected interrupt\n");
  semihost_exit(98);
}

// Cortex-M4: initial SP, reset, NMI, HardFault, MemManage, BusFault, UsageFault, 4 reserved,
// SVCall, DebugMonitor, reserved, PendSV, SysTick; then the board's IRQs (none used here).
__attribute__((section(".vectors"), used)) void (*const g_vectors[16])(void) = {
    (void (*)(void))__stack_top__,
    Reset_Handler,
    default_handler,  // NMI
    fault_entry,      // HardFault
    fault_entry,      // MemManage
    fault_entry,      // BusFault
    fault_entry,      // UsageFault
    0,
    0,
    0,
    0,
    default_handler,  // SVCall
    default_handler,  // DebugMonitor
    0,
    default_handler,  // PendSV
    default_handler,  // SysTick
};
