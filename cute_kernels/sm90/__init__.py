"""SM90 (Hopper) kernels: warp-specialized TMA + WGMMA."""
