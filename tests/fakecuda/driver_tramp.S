/* Exported cu* entry points of the fake libcuda.so.1, with the exact entry
 * shape of NVIDIA's driver (535/550/555):
 *   +0x00 81 3d <disp32> 00 ba 1c 32   cmpl $0x321cba00, g_deinit(%rip)
 *   +0x0a 74 xx                        je   1f
 *   +0x0c ff 25 <disp32>               jmp  *slot_<name>(%rip)
 *   +0x12 nop padding
 *   +0x18 b8 04 00 00 00 c3            mov $4,%eax (CUDA_ERROR_DEINITIALIZED); ret
 * slot_<name> is a .data quad (R_X86_64_RELATIVE) -> hidden impl_<name>.
 * The 8- and 16-bit memsets (XZ in driver_syms.def) have one more instruction
 * between the je and the jmp, as in the real driver: movzbl/movzwl of the value.
 * (No '#' comments in this file: it goes through cpp.) */
	.text
	.hidden g_deinit

.macro TRAMP name
	.hidden impl_\name
	.globl \name
	.type \name, @function
	.p2align 4
\name:
	cmpl $0x321cba00, g_deinit(%rip)
	je 1f
	jmp *slot_\name(%rip)
	.p2align 3
1:	mov $4, %eax
	ret
	.size \name, .-\name
	.pushsection .data
	.p2align 3
	.type slot_\name, @object
slot_\name:
	.quad impl_\name
	.size slot_\name, 8
	.popsection
.endm

/* The memsets' shape: the value argument zero-extended between the je and the jmp. */
.macro TRAMP_ZX name, insn, from, to
	.hidden impl_\name
	.globl \name
	.type \name, @function
	.p2align 4
\name:
	cmpl $0x321cba00, g_deinit(%rip)
	je 1f
	\insn \from, \to
	jmp *slot_\name(%rip)
	.p2align 3
1:	mov $4, %eax
	ret
	.size \name, .-\name
	.pushsection .data
	.p2align 3
	.type slot_\name, @object
slot_\name:
	.quad impl_\name
	.size slot_\name, 8
	.popsection
.endm

#define X(n) TRAMP n
#define XZ(n, insn, from, to) TRAMP_ZX n, insn, from, to
#include "driver_syms.def"
#undef XZ
#undef X

	.section .note.GNU-stack,"",@progbits
