//! Statistics over journal records: pure functions, no I/O.
