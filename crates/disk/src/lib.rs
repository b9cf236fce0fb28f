//! Disk-bound experiments on any Linux machine: an HDD timing model, an emulated disk
//! (FUSE device + loop + ext4), memory budgets per process and iostat-style sampling.
