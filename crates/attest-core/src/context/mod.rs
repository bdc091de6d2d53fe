pub mod bootstrap;
pub mod skill_tool;
pub mod skills;
pub mod workspace_files;
