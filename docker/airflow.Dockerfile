# syntax=docker/dockerfile:1
# The one image of docker-compose.yml: the official Airflow image (Airflow 3.3.2, Python 3.11)
# plus Java 17 and lakestate installed with every pin of pyproject.toml (pyspark and
# pyspark-client 4.2.0, delta-spark, the apache-spark and celery providers, ...).
#
# Every Airflow service runs from it; the Celery workers run the apps' instances, each with the
# Spark bundled in the pinned pyspark wheel (local[*]) when a run needs Spark, so driver,
# executors and Python workers share one Spark, one Python and one lakestate.
#
# Build context: the repository root (docker compose build; see .dockerignore).
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

# Spark 4 runs on Java 17 or 21; the official Airflow image is Debian bookworm, which has 17.
ARG JAVA_VERSION=17

USER root
RUN set -eux; \
    # openjdk's postinst links its man pages, which slim images do not have a folder for.
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends "openjdk-${JAVA_VERSION}-jre-headless"; \
    ln -s "/usr/lib/jvm/java-${JAVA_VERSION}-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/lakestate-java; \
    apt-get autoremove -yqq --purge; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    mkdir -p /opt/lakestate; \
    chown airflow:0 /opt/lakestate
ENV JAVA_HOME=/usr/lib/jvm/lakestate-java
USER airflow

# The dependencies first, from pyproject.toml alone, so that this (long) layer is rebuilt only
# when a pin changes. apache-airflow is pinned to the image's own version as well: a pin that
# disagrees with the base image fails here rather than silently replacing Airflow.
COPY --chown=airflow:0 pyproject.toml /opt/lakestate/pyproject.toml
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('/opt/lakestate/pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/lakestate-requirements.txt \
    && pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /tmp/lakestate-requirements.txt \
    && rm /tmp/lakestate-requirements.txt

# Then lakestate itself, editable: docker-compose.yml mounts the checkout over /opt/lakestate,
# so the containers run the host's code without a rebuild (a rebuild is needed when a pin changes).
COPY --chown=airflow:0 . /opt/lakestate
RUN pip install --no-cache-dir --no-deps -e /opt/lakestate \
    && python -c "import lakestate, pyspark, delta; print('lakestate ok; pyspark', pyspark.__version__)" \
    && spark-submit --version 2>&1 | grep -m1 -i version \
    && java -version

WORKDIR /opt/airflow
