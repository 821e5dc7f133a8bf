// Filled in by the printing work.
