# One image for every role: the compose services differ only in their command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md beat_schedule.py ./
COPY shared ./shared
COPY workers ./workers
COPY producers ./producers
RUN pip install --no-cache-dir ".[flower,postgres,telegram,slack,discord,whatsapp,sms,teams,signal,matrix]"
ENV HERMES_HOME=/data
VOLUME /data
CMD ["hermes", "up"]
