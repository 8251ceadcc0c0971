/* The attention kernels' limits, a C header for every program that runs them (attention,
   transformer_block) and for their callers. */
#ifndef CUDALAB_ATTENTION_LIMITS_H
#define CUDALAB_ATTENTION_LIMITS_H

/* The longest sequence: S*S scores per head are indexed with int products of row and column
   (46340^2 < 2^31, and the kernels split each row in two halves), so S is at most 2*46340. */
#define ATTN_MAX_S 92680

#endif
