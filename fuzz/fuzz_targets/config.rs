//! Config file bytes as `mcpgw serve`, `check-config` and every reload read them: parsing and validation must give a
//! snapshot or a non-empty list of problems, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgw::config::store::snapshot_from_bytes;

fuzz_target!(|data: &[u8]| {
    if let Err(problems) = snapshot_from_bytes(data) {
        assert!(!problems.is_empty(), "an invalid config must name at least one problem");
    }
});
