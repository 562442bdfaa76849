//! The pure expression evaluator: compiled expressions over JSON values, and
//! checking JSON values against contract types.
