/* Built by `make test-install` with the documented command line, against
 * the library installed into a scratch prefix: the header, the library and
 * omst.pc must be enough, with no LD_LIBRARY_PATH. */
#include <omst.h>
#include <stdio.h>

int main(void)
{
	omst_t *h = NULL;
	int rc = omst_connect("/nonexistent/omst.sock", &h);
	if (rc != OMST_ENODAEMON) {
		fprintf(stderr, "install_check: omst_connect: %d (%s), want OMST_ENODAEMON\n", rc, omst_strerror(rc));
		return 1;
	}
	/* The protocol version 5 calls are declared and exported. */
	if (omst_put_fd(NULL, "a", 0, NULL) != OMST_EINVAL || omst_get_to_fd(NULL, "a", 1, NULL) != OMST_EINVAL) {
		fprintf(stderr, "install_check: omst_put_fd/omst_get_to_fd with a NULL handle: want OMST_EINVAL\n");
		return 1;
	}
	printf("install_check: ok (%s)\n", omst_strerror(rc));
	return 0;
}
