/*
 * jio.h: the journal's I/O seam (private to journal/ and its tests).
 *
 * Every write-side system call of the journal writer goes through the
 * function pointers in `jio`, so tests can replace one of them to inject
 * ENOSPC or EIO (beanstalkd's tests do the same with its allocation
 * function).  The segment reader (record.c) opens and reads through it
 * too, so a test can make a segment unreadable (EACCES, EIO) without
 * damaging it.  mono_us is the clock a segment's fill rate is measured
 * with (jpriv.h, SEG_FILL_US), so a test can make a queue fast or slow.
 * Replace members only while no jenv is open, or from the
 * writer thread's point of view atomically (a pointer store).
 */
#ifndef TERN_JOURNAL_JIO_H
#define TERN_JOURNAL_JIO_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct jio_ops {
	int (*openat)(int dirfd, const char *path, int flags, mode_t mode);
	/* pwritev2: flags 0, or RWF_DSYNC (odsync's records) */
	ssize_t (*pwritev)(int fd, const struct iovec *iov, int cnt, off_t off, int flags);
	ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
	ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
	ssize_t (*preadv)(int fd, const struct iovec *iov, int cnt, off_t off);
	int (*fdatasync)(int fd);
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	int (*sync_file_range)(int fd, off_t off, off_t len, unsigned int flags);
	int64_t (*mono_us)(void);
};

extern struct jio_ops jio;
/* Restores the libc defaults. */
void jio_reset(void);

/* Makes the names in directory path durable (the files and directories
 * made, renamed or removed in it): an fsync of the directory, through
 * jio.  0, or -1 with errno.  A name is durable only once its directory
 * was synced (POSIX's rule; ext4 and XFS often commit it sooner, but only
 * as a side effect of other syncs). */
int jio_sync_dir(const char *path);
/* The same for the directory that holds path. */
int jio_sync_parent(const char *path);

#endif
