#ifndef BROKER_CSPAWN_H
#define BROKER_CSPAWN_H

// glibc's spawn actions and pipe2 that Swift's Glibc module (built without _GNU_SOURCE) does not show. The
// header includes nothing, so that this module owns no system type.

/// posix_spawn_file_actions_addclosefrom_np: the child closes every descriptor from `from` up.
int broker_spawn_addclosefrom(void *actions, int from);
/// posix_spawn_file_actions_addchdir_np: the child changes to `path` before it runs.
int broker_spawn_addchdir(void *actions, const char *path);
/// pipe2(descriptors, O_CLOEXEC): both ends close-on-exec from the start.
int broker_pipe_cloexec(int descriptors[2]);

#endif
