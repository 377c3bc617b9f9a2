//! Configuration: the file model, validation into snapshots, the store that swaps them, and the watcher.

pub mod background;
pub mod client_oauth;
pub mod decode;
pub mod defaults;
pub mod exposure;
pub mod fsutil;
pub mod model;
pub mod oauth;
pub mod per_snapshot;
pub mod pins;
pub mod policies;
pub mod redis_store;
pub mod remote;
pub mod retire;
pub mod secrets_key;
pub mod server_credentials;
pub mod settings;
pub mod snapshot;
pub mod store;
pub mod sync;
pub mod user_credentials;
pub mod watch;

pub use decode::Problems;
pub use model::ConfigFile;
pub use settings::Settings;
pub use snapshot::{KeyEntry, Snapshot};
pub use store::{ConfigStore, LoadError, ReloadOutcome, WriteError};

use std::path::PathBuf;

/// The default config path: `$HOME/.gw/gw_mcp_config.json` (`%USERPROFILE%\.gw\...` on Windows).
pub fn default_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".gw").join("gw_mcp_config.json")
}
