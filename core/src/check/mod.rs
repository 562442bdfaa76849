//! Name resolution, dependency graphs, type checking and compilation of the
//! syntax tree into the definition IR.
