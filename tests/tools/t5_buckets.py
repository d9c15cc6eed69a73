#!/usr/bin/env python3
"""Prints the expected buckets that tests/unit/test_biased_attention.cpp embeds: transformers'
T5Attention._relative_position_bucket for relative positions -200 ... 200 (key minus query), one
base-32 digit per position, bidirectional and causal, at num_buckets 32 / max_distance 128 (T5's)
and 8 / 12 (saturating). Run with a Python that has torch and transformers (the test was made
with transformers 4.44.2):  python3 tests/tools/t5_buckets.py"""
import torch
import transformers
from transformers.models.t5.modeling_t5 import T5Attention

DIGITS = '0123456789abcdefghijklmnopqrstuv'
LO, HI = -200, 200
WIDTH = 100  # digits per C++ string piece


def main():
    n = torch.arange(LO, HI + 1, dtype=torch.long)
    print(f'// transformers {transformers.__version__}, relative positions {LO} ... {HI}')
    for buckets, distance in ((32, 128), (8, 12)):
        for bidirectional in (True, False):
            b = T5Attention._relative_position_bucket(n, bidirectional=bidirectional, num_buckets=buckets,
                                                      max_distance=distance)
            digits = ''.join(DIGITS[int(v)] for v in b)
            pieces = '\n'.join(f'     "{digits[i:i + WIDTH]}"' for i in range(0, len(digits), WIDTH))
            print(f'    {{{buckets}, {distance}, {str(bidirectional).lower()},\n{pieces}}},')


if __name__ == '__main__':
    main()
