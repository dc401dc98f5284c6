#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include "CSpawn.h"

int broker_spawn_addclosefrom(void *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
}

int broker_spawn_addchdir(void *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np((posix_spawn_file_actions_t *)actions, path);
}

int broker_pipe_cloexec(int descriptors[2]) { return pipe2(descriptors, O_CLOEXEC); }
