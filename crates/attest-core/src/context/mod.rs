pub mod bootstrap;
pub mod skills;
pub mod workspace_files;
