//! The guest image: Debian kernel + busybox/dropbear initramfs, content-addressed cache.
