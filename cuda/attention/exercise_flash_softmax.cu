// The fixed end of exercise flash_softmax's CUDA file: the entry point(s) the check calls. `invoke exercise start
// flash_softmax --track cuda` appends it to the learner's file; it is never compiled on its own.

template <int D>
static int exercise_flash(int BH, int S, const float *q, const float *k, const float *v, float *o, float scale,
                          int causal, cudaStream_t stream) {
    const size_t smem = FlashLayout<D>::BYTES;
    const cudaError_t e = cudalab_allow_dynamic_smem(attn_flash_fwd<D>, smem);
    if (e != cudaSuccess) return (int)e;
    const dim3 grid((unsigned)cdiv(S, FA_BR), (unsigned)BH);
    attn_flash_fwd<D><<<grid, FA_NT, smem, stream>>>(q, k, v, o, S, scale * CUDALAB_LOG2E, causal, 0);
    return (int)cudaGetLastError();
}

// The check calls this with device memory: BH slabs of S x D, D = 32, 64 or 128.
extern "C" int exercise_run(const float *q, const float *k, const float *v, float *o, int BH, int S, int D,
                            float scale, int causal, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (D == 32) return exercise_flash<32>(BH, S, q, k, v, o, scale, causal, s);
    if (D == 64) return exercise_flash<64>(BH, S, q, k, v, o, scale, causal, s);
    if (D == 128) return exercise_flash<128>(BH, S, q, k, v, o, scale, causal, s);
    return (int)cudaErrorInvalidValue;
}
