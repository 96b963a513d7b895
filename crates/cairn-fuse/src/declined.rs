//! The requests cairn declines, answered in one place for every server on
//! cairn's transport: [`crate::adapter::CairnFuse`] and the null server of
//! the FUSE floor benchmark (`bench/driver`'s `nullfs`, issue #37), which
//! must decline exactly what cairn declines for the floor to measure the
//! same transport.
//!
//! [`declined_requests!`] expands, inside an `impl fuser::Filesystem`, to
//! the handlers of OPENDIR, FLUSH, RELEASE and RELEASEDIR. Each counts the
//! request in `self.metrics` (a [`crate::Metrics`]) and answers at once: no
//! state is read or kept, nothing of the engine is named, so a server with
//! no file system behind it can use it. OPEN is not here: cairn answers it
//! (with `parallel_dio`), the null server never does.
//!
//! A macro, not a trait: fuser's `Filesystem` has one method per opcode
//! and each server implements it whole; the macro writes these four
//! methods into both impls.

/// The handlers of the requests cairn declines (see the module essay);
/// use inside `impl fuser::Filesystem for S` where `S` has a field
/// `metrics` that derefs to [`crate::Metrics`].
#[macro_export]
macro_rules! declined_requests {
    () => {
        /// FLUSH is answered ENOSYS (the kernel sets `no_flush` and stops
        /// sending it): without an OPEN reply there is no FOPEN_NOFLUSH, and
        /// there is nothing to flush (every write has reached the server;
        /// with the writeback cache the kernel writes its pages back before
        /// FLUSH).
        fn flush(
            &self,
            _req: &::fuser::Request,
            _ino: ::fuser::INodeNo,
            _fh: ::fuser::FileHandle,
            _lock_owner: ::fuser::LockOwner,
            reply: ::fuser::ReplyEmpty,
        ) {
            let _t = self.metrics.timer($crate::metrics::Op::Flush);
            reply.error(::fuser::Errno::ENOSYS);
        }

        /// RELEASE only comes where OPEN was answered: nothing is kept per
        /// open, so there is nothing to let go.
        fn release(
            &self,
            _req: &::fuser::Request,
            _ino: ::fuser::INodeNo,
            _fh: ::fuser::FileHandle,
            _flags: ::fuser::OpenFlags,
            _lock_owner: Option<::fuser::LockOwner>,
            _flush: bool,
            reply: ::fuser::ReplyEmpty,
        ) {
            let _t = self.metrics.timer($crate::metrics::Op::Release);
            reply.ok();
        }

        /// OPENDIR is answered ENOSYS (`no_opendir`: directories open as if
        /// with FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE, no OPENDIR or RELEASEDIR).
        fn opendir(
            &self,
            _req: &::fuser::Request,
            _ino: ::fuser::INodeNo,
            _flags: ::fuser::OpenFlags,
            reply: ::fuser::ReplyOpen,
        ) {
            let _t = self.metrics.timer($crate::metrics::Op::Opendir);
            reply.error(::fuser::Errno::ENOSYS);
        }

        /// RELEASEDIR: as RELEASE, nothing kept per open directory.
        fn releasedir(
            &self,
            _req: &::fuser::Request,
            _ino: ::fuser::INodeNo,
            _fh: ::fuser::FileHandle,
            _flags: ::fuser::OpenFlags,
            reply: ::fuser::ReplyEmpty,
        ) {
            let _t = self.metrics.timer($crate::metrics::Op::Releasedir);
            reply.ok();
        }
    };
}
