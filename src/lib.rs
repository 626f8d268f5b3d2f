pub mod config;
pub mod protocol;
