# Sourced by the benchmark scripts that set Debian's nginx beside the broker as the floor of its constant document.

# free_port: prints a TCP port on 127.0.0.1 that nothing listens on now (for a floor server given a port).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# static_nginx_conf WORK PORT PROCESS-LINES: prints a configuration that serves WORK/www on 127.0.0.1:PORT
# as a static file would be served (no access log, the broker's Cache-Control), its pid and error log and temporary
# files under WORK; PROCESS-LINES are the first lines (how many workers, or one process in the foreground).
static_nginx_conf() {
  local work=$1 port=$2 process=$3
  mkdir -p "$work/nginx"
  cat <<CONF
$process
pid $work/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  types { application/json json; }
  server {
    listen 127.0.0.1:$port;
    root $work/www;
    location / { add_header Cache-Control "public, max-age=300"; }
  }
}
CONF
}
