// Tensor implementation: being written.
