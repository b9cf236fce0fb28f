//! `vodkit serve`: an HTTP/1.1 origin for video files that sends bodies with sendfile(2)
//! from the page cache and routes cache misses through the prefetch engine.
