"""What the gpu lane runs on: CUDA in bf16. ``ZOOMATTN_GPU_LANE_DEVICE=cpu`` runs the lane's code
on the CPU (bf16 still) to check the tests themselves where no GPU is at hand; it proves nothing
about CUDA."""

import os

from zoomattn.placement import Placement

DEVICE = os.environ.get("ZOOMATTN_GPU_LANE_DEVICE", "cuda")
LANE = Placement(DEVICE, "bfloat16", 1 if DEVICE == "cuda" else 0)
NF4_BF16 = {"load_in_4bit": True, "quant_type": "nf4", "double_quant": True,
            "compute_dtype": "bfloat16"}  # fmt: skip
