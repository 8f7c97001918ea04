# The stand-in for the official image `denoland/deno:<version>` (Debian), for a machine that cannot
# pull it: the same layout as denoland/deno_docker's debian.dockerfile, from Debian's packages and
# npm's `deno` binary instead of the release downloads. deploy/container/build.ts builds it, over
# the Debian stable-slim base that deploy/container/debian_slim.sh makes, with the build context
# holding `deno` (npm's @deno/linux-x64-glibc, the same binary as the release's) and the
# entrypoint. Differences from the official image: `/tini` is Debian's tini 0.19.0 (a link to
# /usr/bin/tini) rather than the GitHub release's build of the same version, and the labels say
# it is a stand-in.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}

RUN useradd --uid 1993 --user-group deno \
  && mkdir /deno-dir/ \
  && chown deno:deno /deno-dir/ \
  && ln -s /usr/bin/tini /tini

ENV DENO_USE_CGROUPS=1
ENV DENO_DIR=/deno-dir/
ENV DENO_INSTALL_ROOT=/usr/local

ARG DENO_VERSION
ENV DENO_VERSION=${DENO_VERSION}
COPY deno /usr/bin/deno

ARG RECIPE
LABEL org.opencontainers.image.title="Deno" \
      org.opencontainers.image.description="Stand-in for denoland/deno (Debian), built offline by deploy/container/build.ts" \
      org.opencontainers.image.version="${DENO_VERSION}" \
      discovery.stand-in.recipe="${RECIPE}"

COPY docker_entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh

ENTRYPOINT ["/tini", "--", "docker-entrypoint.sh"]
CMD ["eval", "console.log('Welcome to Deno!')"]
