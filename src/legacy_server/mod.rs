//! Built-in legacy MCP server (placeholder, being written).
