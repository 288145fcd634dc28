//! requestState sealing (placeholder, being written).
