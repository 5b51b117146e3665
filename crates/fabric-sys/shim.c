/* Forwarders for libfabric's static inline API; see shim.h. */
#include "shim.h"

uint32_t fis_header_version(void) { return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION); }
uint64_t fis_addr_unspec(void) { return FI_ADDR_UNSPEC; }

struct fi_info *fis_allocinfo(void) { return fi_allocinfo(); }
int fis_close(struct fid *fid) { return fi_close(fid); }

int fis_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return fi_fabric(attr, fabric, context);
}
int fis_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context)
{
	return fi_domain(fabric, info, domain, context);
}
int fis_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context)
{
	return fi_endpoint(domain, info, ep, context);
}
int fis_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags) { return fi_ep_bind(ep, bfid, flags); }
int fis_enable(struct fid_ep *ep) { return fi_enable(ep); }
int fis_getname(fid_t fid, void *addr, size_t *addrlen) { return fi_getname(fid, addr, addrlen); }

int fis_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context)
{
	return fi_av_open(domain, attr, av, context);
}
int fis_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
		  void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}
int fis_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	return fi_av_remove(av, fi_addr, count, flags);
}
const char *fis_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len)
{
	return fi_av_straddr(av, addr, buf, len);
}

int fis_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}
ssize_t fis_cq_read(struct fid_cq *cq, void *buf, size_t count) { return fi_cq_read(cq, buf, count); }
ssize_t fis_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}
const char *fis_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}

int fis_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access, uint64_t offset,
	       uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}
void *fis_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t fis_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
int fis_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags) { return fi_mr_bind(mr, bfid, flags); }
int fis_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }

ssize_t fis_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, void *context)
{
	return fi_send(ep, buf, len, desc, dest_addr, context);
}
ssize_t fis_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, void *context)
{
	return fi_recv(ep, buf, len, desc, src_addr, context);
}
ssize_t fis_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		     fi_addr_t dest_addr, void *context)
{
	return fi_senddata(ep, buf, len, desc, data, dest_addr, context);
}

ssize_t fis_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, uint64_t addr,
		  uint64_t key, void *context)
{
	return fi_write(ep, buf, len, desc, dest_addr, addr, key, context);
}
ssize_t fis_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		      fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context)
{
	return fi_writedata(ep, buf, len, desc, data, dest_addr, addr, key, context);
}
ssize_t fis_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return fi_writemsg(ep, msg, flags);
}
ssize_t fis_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t addr,
		 uint64_t key, void *context)
{
	return fi_read(ep, buf, len, desc, src_addr, addr, key, context);
}
