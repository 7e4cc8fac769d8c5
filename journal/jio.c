/* jio.c: default (libc) implementation of the journal I/O seam. */
#include "jio.h"

#include "../lib/tern.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int jio_openat_libc(int dirfd, const char *path, int flags, mode_t mode)
{
	return openat(dirfd, path, flags, mode);
}

static int jio_fallocate_libc(int fd, int mode, off_t off, off_t len)
{
	return fallocate(fd, mode, off, len);
}

static int jio_sync_file_range_libc(int fd, off_t off, off_t len, unsigned int flags)
{
	return sync_file_range(fd, off, len, flags);
}

struct jio_ops jio = {
	.openat = jio_openat_libc,
	.pwritev = pwritev2,
	.pwrite = pwrite,
	.pread = pread,
	.preadv = preadv,
	.fdatasync = fdatasync,
	.fallocate = jio_fallocate_libc,
	.sync_file_range = jio_sync_file_range_libc,
	.mono_us = tern_mono_us,
};

void jio_reset(void)
{
	jio.openat = jio_openat_libc;
	jio.pwritev = pwritev2;
	jio.pwrite = pwrite;
	jio.pread = pread;
	jio.preadv = preadv;
	jio.fdatasync = fdatasync;
	jio.fallocate = jio_fallocate_libc;
	jio.sync_file_range = jio_sync_file_range_libc;
	jio.mono_us = tern_mono_us;
}

int jio_sync_dir(const char *path)
{
	int fd = jio.openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0), rc, e;

	if (fd < 0)
		return -1;
	rc = jio.fdatasync(fd);
	e = errno;
	close(fd);
	errno = e;
	return rc;
}

int jio_sync_parent(const char *path)
{
	char buf[PATH_MAX];
	char *slash;
	size_t n = strlen(path);

	if (n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, path, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = 0;
	slash = strrchr(buf, '/');
	if (!slash)
		return jio_sync_dir(".");
	if (slash == buf)
		slash[1] = 0;
	else
		*slash = 0;
	return jio_sync_dir(buf);
}
