"""What the PyTorch baselines share; imported before torch."""
import os


def set_blas_threads(argv, one_thread_flags=("--ddp",)):
    """OpenBLAS reads its thread count when it is loaded (with torch): one per process when any of
    one_thread_flags is given (gloo processes), else --threads (default 2)."""
    threads = "1" if any(f in argv for f in one_thread_flags) else "2"
    if "--threads" in argv and "--ddp" not in argv:
        threads = argv[argv.index("--threads") + 1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, threads)
