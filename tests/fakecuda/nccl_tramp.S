/* The two fake NCCL entries whose first instruction is not a push, as in the real 2.32.3:
 * `movabs $0x5aa3cafebeef,%rax; push %rbp; mov %rsp,%rbp` (the real code goes on to check a
 * config's magic against it). Here the frame is undone and the call goes on in C, with the
 * arguments (the 128-byte unique id at [rsp+8] included) as they were at the entry. */
    .text
#define ENTRY(pname, name, impl)        \
    .globl pname;                       \
    .type pname, @function;             \
pname:                                  \
    movabs $0x5aa3cafebeef, %rax;       \
    push %rbp;                          \
    mov %rsp, %rbp;                     \
    pop %rbp;                           \
    jmp impl;                           \
    .size pname, .-pname;               \
    .weak name;                         \
    .type name, @function;              \
    .set name, pname

ENTRY(pncclCommInitRankConfig, ncclCommInitRankConfig, fake_comm_init_rank_config)
ENTRY(pncclCommInitAll, ncclCommInitAll, fake_comm_init_all)
    .section .note.GNU-stack,"",@progbits
