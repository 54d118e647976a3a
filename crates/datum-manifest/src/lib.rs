//! Repository loading. (Skeleton: being written.)
