/* A small file beside the checkpoints of a directory (fsc_ckpt_write_file, ckpt.h): the trainer's train_config.json.
 * Written as checkpoints are: a temporary in the same directory, fsync, rename over the name, fsync of the
 * directory, so after a crash the name holds the old text or the new, never a part. Not a checkpoint: saves,
 * resumes, cleaning and retention never read or remove it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt_impl.h"

fsc_status fsc_ckpt_write_file(const char *dir, const char *name, const void *data, size_t len) {
    if (!dir || !*dir) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_write_file: no directory (dir is NULL or empty)");
    if (!name || !*name) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_write_file: no file name (name is NULL or empty)");
    FSC_CHECK_BUF(data, len);
    if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") || !strncmp(name, "step-", 5))
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_write_file: '%s' is not a plain file name beside the checkpoints "
                         "(no '/', not step-*)", name);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return fsc_error(FSC_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
    char path[4096], tmp[4096 + 32];
    FSC_TRY(ck_join(path, sizeof path, dir, name));
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp); /* a leftover of this process id's interrupted write */
    fsc_status s = ck_write_synced(tmp, data, len);
    if (s == FSC_OK && rename(tmp, path) != 0)
        s = fsc_error(FSC_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    if (s != FSC_OK) unlink(tmp);
    if (s == FSC_OK) s = ck_fsync_dir(dir);
    return s;
}
