/* SPDX-License-Identifier: MIT */
/*
 * log.h -- where the daemon's lines go, and the status `ptfs umount`
 * reads.
 *
 * A line goes to -o log=FILE when given; otherwise, in the foreground, to
 * stderr, and once detached to syslog when a syslog socket exists
 * (/dev/log), else to ptfs.log in the state directory below: a daemon's
 * messages reach a file a person can read.  The lines
 * logged from the end of the session loop on (the last commit, what was
 * kept or dropped) are also kept for the status file.
 *
 * The status file (ptfs_status_*): at start the daemon names it in the
 * mount root's attribute user.ptfs.daemon ("PID PATH"); at exit it writes
 * "ok" or "failed" and the final lines there, atomically.  `ptfs umount`
 * unmounts, waits for the process to end, prints the lines and exits by
 * the first word.
 */
#ifndef PTFS_FS_LOG_H
#define PTFS_FS_LOG_H

#include <stdbool.h>

/* The state directory ($XDG_STATE_HOME/ptfs or ~/.local/state/ptfs, or
 * /tmp/ptfs-UID without a home), created (0700) when @make; NULL when
 * there is none. */
const char *ptfs_state_dir(bool make);

/* Send the lines to @file (NULL: the default above) from now on;
 * @detached: stderr is gone.  0, or -errno with a line on stderr. */
int ptfs_log_open(const char *file, bool detached);

/* Lines go to stderr as well until this is called (the daemon has
 * detached, or serves in the foreground with a log file). */
void ptfs_log_detached(void);

/* Keep every line from now on for ptfs_status_write(). */
void ptfs_log_keep(void);

/* Make the status file for this process (0, or -errno: `ptfs umount`
 * then cannot report, and says so); its path, or NULL. */
int ptfs_status_init(void);
const char *ptfs_status_path(void);

/* Write the verdict and the kept lines, atomically. */
void ptfs_status_write(bool ok);

#endif /* PTFS_FS_LOG_H */
