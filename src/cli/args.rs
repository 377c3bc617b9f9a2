//! The clap definitions of the management commands (`mcpgw config|project|user|key|system ...`): every subcommand,
//! its flags and its `--help` text with an example. [`super::manage`] turns them into operations and runs them.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::server_edit::ServerEdit;

mod people;
pub use people::{KeyAction, KeyCommand, UserAction, UserCommand};

/// Where a management command acts and how it prints; accepted before or after the subcommand.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Config file to manage directly (file mode) [default: $HOME/.gw/gw_mcp_config.json]
    #[arg(long, env = "GW_CONFIG_PATH", value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,
    /// Manage a running gateway through its admin REST API instead (e.g. http://127.0.0.1:8001); the admin key is
    /// read from the environment variable GW_ADMIN_APIKEY. Wins over --config.
    #[arg(long, env = "GW_ADMIN_URL", value_name = "URL", global = true)]
    pub admin_url: Option<String>,
    /// Print the answer's `data` as JSON (as the admin REST API returns it) instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Show whole API keys in key listings (file mode only; the admin API never returns a key after creating it).
    #[arg(long, global = true)]
    pub show_secret: bool,
}

/// `mcpgw config ...`
#[derive(Debug, Args)]
pub struct ConfigCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// List MCP configurations with their servers and the projects using them.
    ///
    /// Example: mcpgw config list --json
    List,
    /// Create an empty MCP configuration.
    ///
    /// Example: mcpgw config create staging
    Create { name: String },
    /// Show one configuration (id or name) with its servers (secrets masked).
    ///
    /// Example: mcpgw config get staging
    Get {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
    },
    /// Rename a configuration.
    ///
    /// Example: mcpgw config rename staging production
    Rename {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        new_name: String,
    },
    /// Copy a configuration with all its servers under a new name.
    ///
    /// Example: mcpgw config copy production production-canary
    Copy {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        new_name: String,
    },
    /// Delete a configuration; refused (exit 5) while a project uses it.
    ///
    /// Example: mcpgw config delete staging
    Delete {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
    },
    /// List the upstream servers of a configuration.
    ///
    /// Example: mcpgw config servers production
    Servers {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
    },
    /// Show one upstream server of a configuration (secrets masked).
    ///
    /// Example: mcpgw config get-server production github
    GetServer {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
    },
    /// Show a server's tool pins: each tool of the gateway's last discovery against its pin (pinned, changed, new,
    /// missing). The last discovery lives in the running gateway: use --admin-url to see it; on a file, the pins alone.
    ///
    /// Example: mcpgw config pins production github --admin-url http://127.0.0.1:8001
    Pins {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
    },
    /// Approve a tool's current definition (pin what the gateway's last discovery found); needs --admin-url.
    /// --sha256 is the pin you reviewed (CURRENT in `mcpgw config pins`): if the server changed the definition since,
    /// the approval is refused (exit 5) and nothing is pinned.
    ///
    /// Example: mcpgw config approve-tool production github create_issue --sha256 sha256:9f86d0…
    ///   --admin-url http://127.0.0.1:8001
    ApproveTool {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        tool: String,
        /// The pin of the definition you reviewed (`sha256:` and 64 hex digits; the prefix may be left out).
        #[arg(long, value_name = "HASH")]
        sha256: String,
    },
    /// Show a server's prompt pins: each prompt of the gateway's last listing against its pin, as `pins` shows tools.
    ///
    /// Example: mcpgw config prompt-pins production github --admin-url http://127.0.0.1:8001
    PromptPins {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
    },
    /// Approve a prompt's current definition by the pin you reviewed (CURRENT in `mcpgw config prompt-pins`); needs
    /// --admin-url. Refused (exit 5) when the server changed it since.
    ///
    /// Example: mcpgw config approve-prompt production github review_pr --sha256 sha256:9f86d0…
    ///   --admin-url http://127.0.0.1:8001
    ApprovePrompt {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        prompt: String,
        /// The pin of the definition you reviewed (`sha256:` and 64 hex digits; the prefix may be left out).
        #[arg(long, value_name = "HASH")]
        sha256: String,
    },
    /// Show a server's resource pins: each resource (by URI) and resource template (by URI template) of the gateway's
    /// last listing against its pin.
    ///
    /// Example: mcpgw config resource-pins production fs --admin-url http://127.0.0.1:8001
    ResourcePins {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
    },
    /// Approve a resource's or resource template's current definition by the pin you reviewed (CURRENT in
    /// `mcpgw config resource-pins`); needs --admin-url. Refused (exit 5) when the server changed it since.
    ///
    /// Example: mcpgw config approve-resource production fs file:///docs/readme.md --sha256 sha256:9f86d0…
    ///   --admin-url http://127.0.0.1:8001
    ApproveResource {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        /// The resource's URI, or the template's URI template.
        uri: String,
        /// The pin of the definition you reviewed (`sha256:` and 64 hex digits; the prefix may be left out).
        #[arg(long, value_name = "HASH")]
        sha256: String,
    },
    /// Add an upstream server (a stdio command, or a remote server with --url) to a configuration.
    ///
    /// Example: mcpgw config add-server production --name github --command npx --arg -y
    ///   --arg @modelcontextprotocol/server-github --env GITHUB_TOKEN=ghp_xxx --description "GitHub"
    AddServer {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        #[command(flatten)]
        edit: ServerEdit,
    },
    /// Change an upstream server: the given flags replace those fields, the rest is kept (--from-file replaces all).
    ///
    /// Example: mcpgw config update-server production github --env GITHUB_TOKEN=ghp_new
    UpdateServer {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
        #[command(flatten)]
        edit: ServerEdit,
    },
    /// Remove an upstream server from a configuration.
    ///
    /// Example: mcpgw config remove-server production github
    RemoveServer {
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
        server: String,
    },
    /// Validate the whole config file and list every problem (exit 3 when invalid).
    ///
    /// Example: mcpgw config validate --config ./gw_mcp_config.json
    Validate,
}

/// `mcpgw project ...`
#[derive(Debug, Args)]
pub struct ProjectCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: ProjectAction,
}

#[derive(Debug, Subcommand)]
pub enum ProjectAction {
    /// List projects with their MCP configuration and members.
    ///
    /// Example: mcpgw project list
    List,
    /// Create a project, optionally using an MCP configuration (id or name).
    ///
    /// Example: mcpgw project create payments --mcp-config production
    Create {
        name: String,
        /// The MCP configuration the project uses (id or name).
        #[arg(long, value_name = "CONFIG")]
        mcp_config: Option<String>,
    },
    /// Show one project (id or name) with its members.
    ///
    /// Example: mcpgw project get payments
    Get { project: String },
    /// Change a project's name and/or MCP configuration.
    ///
    /// Example: mcpgw project update payments --name billing --mcp-config staging
    Update {
        project: String,
        /// A new name.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Use this MCP configuration (id or name).
        #[arg(long, value_name = "CONFIG", conflicts_with = "no_mcp_config")]
        mcp_config: Option<String>,
        /// Use no MCP configuration.
        #[arg(long)]
        no_mcp_config: bool,
    },
    /// Rename a project.
    ///
    /// Example: mcpgw project rename payments billing
    Rename { project: String, new_name: String },
    /// Point a project at an MCP configuration (id or name).
    ///
    /// Example: mcpgw project set-config payments production
    SetConfig {
        project: String,
        #[arg(id = "config_ident", value_name = "CONFIG")]
        config: String,
    },
    /// Delete a project and its API keys.
    ///
    /// Example: mcpgw project delete payments
    Delete { project: String },
    /// List a project's members.
    ///
    /// Example: mcpgw project members payments
    Members { project: String },
    /// Add a user (id or e-mail) to a project.
    ///
    /// Example: mcpgw project add-user payments alice@example.com
    AddUser { project: String, user: String },
    /// Remove a user from a project; deletes that user's keys for the project.
    ///
    /// Example: mcpgw project remove-user payments alice@example.com
    RemoveUser { project: String, user: String },
}

/// `mcpgw system ...`
#[derive(Debug, Args)]
pub struct SystemCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: SystemAction,
}

#[derive(Debug, Subcommand)]
pub enum SystemAction {
    /// Show the health report (in file mode: the file's state and counts).
    ///
    /// Example: mcpgw system health --admin-url http://127.0.0.1:8001
    Health,
    /// Write a backup with every API key encrypted (AES-256-GCM; key from GW_BACKUP_KEY or gw_backup.key).
    ///
    /// The file must be inside the backup directory (gw_backup_dir, by default `backups` beside the config file); a
    /// relative path is taken from the current directory (file mode). An existing file is replaced only with
    /// --overwrite.
    ///
    /// Example: mcpgw system backup backups/gw-2026-01-01.json
    Backup {
        output_file: PathBuf,
        /// Replace the file when it exists (a regular file only).
        #[arg(long)]
        overwrite: bool,
    },
    /// Replace the whole configuration with a backup; an invalid backup changes nothing.
    ///
    /// The backup must be a regular file of at most 64 MiB inside the backup directory; a relative path is taken
    /// from the current directory (file mode).
    ///
    /// Example: mcpgw system restore backups/gw-2026-01-01.json
    Restore { input_file: PathBuf },
    /// Reset to what `init` writes (keeping the admin key); needs --yes-really-reset.
    ///
    /// Example: mcpgw system reset --yes-really-reset
    Reset {
        /// Confirms that every config, project, user and key is to be deleted.
        #[arg(long)]
        yes_really_reset: bool,
    },
}
