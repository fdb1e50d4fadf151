"""The ``local`` driver: real NFS and CIFS shares served from this host
(ext4 images on loop devices, NFS-Ganesha and Samba). doc/local_driver.rst."""
