//! CLI tests: the built `datum` binary on real repositories in temporary
//! directories, always with `--root` so nothing touches the machine's /etc.

mod apply;
mod backup;
mod crash;
mod lint;
mod sensitive;
mod support;
mod validation;
