//! Scratch buffers the FTL reuses instead of allocating per operation. They carry no
//! state between operations: an operation takes a buffer, uses it and puts it back.

/// The FTL's reusable buffers.
#[derive(Debug)]
pub(crate) struct Scratch {
    /// OOB bytes of one page.
    oob: Vec<u8>,
    /// Where [`crate::Ftl::read_ref`] gathers a read that is not one run of one page.
    read: Vec<u8>,
}

impl Scratch {
    /// Buffers for pages with `oob_per_page` OOB bytes.
    pub(crate) fn new(oob_per_page: usize) -> Scratch {
        Scratch {
            oob: vec![0u8; oob_per_page],
            read: Vec::new(),
        }
    }

    /// OOB bytes per page (the OOB buffer's size).
    #[inline]
    pub(crate) fn oob_len(&self) -> usize {
        self.oob.len()
    }

    /// Take the OOB buffer (give it back with [`Scratch::put_oob`]).
    #[inline]
    pub(crate) fn take_oob(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.oob)
    }

    /// Give back the OOB buffer.
    #[inline]
    pub(crate) fn put_oob(&mut self, oob: Vec<u8>) {
        debug_assert!(self.oob.is_empty(), "scratch: OOB buffer given back twice");
        self.oob = oob;
    }

    /// Take the read buffer (give it back with [`Scratch::put_read`]).
    #[inline]
    pub(crate) fn take_read(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.read)
    }

    /// Give back the read buffer.
    #[inline]
    pub(crate) fn put_read(&mut self, read: Vec<u8>) {
        self.read = read;
    }

    /// The read buffer's bytes (what the last gathered read left there).
    #[inline]
    pub(crate) fn read(&self) -> &[u8] {
        &self.read
    }
}
