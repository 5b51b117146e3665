/*
 * Real, linkable functions for libfabric's `static inline` calls.
 *
 * libfabric implements most of its API as `static inline` functions in the
 * headers that jump through the provider's ops tables; they have no symbol in
 * libfabric.so, so Rust cannot link to them. Each `fis_*` here has the same
 * signature as the `fi_*` it forwards to.
 */
#ifndef FABRIC_SYS_SHIM_H
#define FABRIC_SYS_SHIM_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

/* Values that are macros bindgen cannot evaluate (casts, function-like). */
uint32_t fis_header_version(void);
uint64_t fis_addr_unspec(void);

struct fi_info *fis_allocinfo(void);
int fis_close(struct fid *fid);

int fis_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int fis_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context);
int fis_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int fis_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int fis_enable(struct fid_ep *ep);
int fis_getname(fid_t fid, void *addr, size_t *addrlen);

int fis_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int fis_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
		  void *context);
int fis_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags);
const char *fis_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len);

int fis_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
ssize_t fis_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t fis_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *fis_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len);

int fis_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access, uint64_t offset,
	       uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
void *fis_mr_desc(struct fid_mr *mr);
uint64_t fis_mr_key(struct fid_mr *mr);
int fis_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int fis_mr_enable(struct fid_mr *mr);

ssize_t fis_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, void *context);
ssize_t fis_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, void *context);
ssize_t fis_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		     fi_addr_t dest_addr, void *context);

ssize_t fis_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, uint64_t addr,
		  uint64_t key, void *context);
ssize_t fis_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		      fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context);
ssize_t fis_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags);
ssize_t fis_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t addr,
		 uint64_t key, void *context);

#endif
