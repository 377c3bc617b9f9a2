//! The clap definitions of `mcpgw user ...` and `mcpgw key ...` (see [`super`]).

use clap::{Args, Subcommand};

use super::Target;

/// `mcpgw user ...`
#[derive(Debug, Args)]
pub struct UserCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: UserAction,
}

#[derive(Debug, Subcommand)]
pub enum UserAction {
    /// List users with their projects.
    ///
    /// Example: mcpgw user list
    List,
    /// Create a user.
    ///
    /// Example: mcpgw user create alice@example.com
    Create { email: String },
    /// Show one user (id or e-mail) with their projects.
    ///
    /// Example: mcpgw user get alice@example.com
    Get { user: String },
    /// Change a user's e-mail address.
    ///
    /// Example: mcpgw user update alice@example.com alice@corp.example.com
    Update { user: String, new_email: String },
    /// Delete a user, their memberships and their keys.
    ///
    /// Example: mcpgw user delete alice@example.com
    Delete { user: String },
    /// List a user's API keys (masked).
    ///
    /// Example: mcpgw user keys alice@example.com
    Keys { user: String },
    /// List a user's own upstream credentials: per configuration and server, the names set and when (never values).
    ///
    /// Example: mcpgw user credentials alice@example.com
    Credentials { user: String },
    /// Set one of a user's credentials for a server; the value is read from stdin, never from the command line.
    ///
    /// Example: mcpgw user set-credential alice@example.com default_config github GITHUB_TOKEN < token.txt
    SetCredential {
        user: String,
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        name: String,
    },
    /// Delete a user's credentials for a server (all of them, or one with --name).
    ///
    /// Example: mcpgw user delete-credential alice@example.com default_config github
    DeleteCredential {
        user: String,
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        /// Delete only this name.
        #[arg(long)]
        name: Option<String>,
    },
}

/// `mcpgw key ...`
#[derive(Debug, Args)]
pub struct KeyCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: KeyAction,
}

#[derive(Debug, Subcommand)]
pub enum KeyAction {
    /// Create a gateway API key for a user in a project they belong to; the key is printed once.
    ///
    /// Example: mcpgw key create --user alice@example.com --project payments
    Create {
        /// The user (id or e-mail).
        #[arg(long, value_name = "USER")]
        user: String,
        /// The project (id or name); the user must be a member.
        #[arg(long, value_name = "PROJECT")]
        project: String,
    },
    /// List API keys (key id and masked key; --show-secret shows whole keys in file mode).
    ///
    /// Example: mcpgw key list --user alice@example.com
    List {
        /// Only this user's keys (id or e-mail).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
    },
    /// Show one API key (the key or its key id).
    ///
    /// Example: mcpgw key get 3f2a9c1b7d4e
    Get { key: String },
    /// Replace a key with a new one (printed once); the old key stops working at once.
    ///
    /// Example: mcpgw key rotate 3f2a9c1b7d4e
    Rotate { key: String },
    /// Disable a key; requests with it get 401 until it is enabled again.
    ///
    /// Example: mcpgw key disable 3f2a9c1b7d4e
    Disable { key: String },
    /// Enable a disabled key.
    ///
    /// Example: mcpgw key enable 3f2a9c1b7d4e
    Enable { key: String },
    /// Delete a key.
    ///
    /// Example: mcpgw key delete 3f2a9c1b7d4e
    Delete { key: String },
}
