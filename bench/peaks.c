// peaks — the register-only arithmetic peaks of THREADS threads (kernels/peak):
//   peaks THREADS  ->  "ISA|fp32 256-bit|fp32 512-bit|bf16 dot|AMX tiles|bf16 run|unit" in GFLOP/s
// (0: the CPU lacks it); "bf16 run" is the peak a bf16 run's MFU is quoted
// against (peak_for), "unit" what that peak measured.
#include <stdio.h>
#include <stdlib.h>

#include "kernels/matmul.h"
#include "kernels/peak.h"

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1) return 2;
    kernels_set_threads(threads);
    Peaks p;
    peak_probe(&p, threads);
    printf("%s|%.1f|%.1f|%.1f|%.1f|%.1f|%s\n", peak_isa(&p), p.fp32_256, p.fp32_512, p.bf16, p.amx,
           peak_for(&p, PREC_BF16), peak_for_name(&p, PREC_BF16));
    return 0;
}
