// Filled in by the RNG work (TORCH_RNG.md).
