
=pod

=head1 NAME

RlockTest::Sentinel - a throw-away Redis Sentinel deployment on loopback
ports for rlock's tests: a primary, its replicas and three Sentinels;
failovers, killed and frozen servers, and writes lost in a failover

=head1 SYNOPSIS

  my $dep = RlockTest::Sentinel->start(data_password => 'datapw',
	sentinel_password => 'sentpw');
  # rlock.nodes = $dep->nodes_setting, rlock.sentinel_master = 'main'
  my $old = $dep->primary;
  my $new = $dep->failover(timeout => 30);
  $dep->wait_converted($old, 30);
  my $killed = $dep->primary;
  $new = $dep->kill_primary(timeout => 30);
  $dep->restart_node($killed);
  $dep->stop;

Every wait is bounded and dies (or returns false, where said) when the
bound passes: a test never hangs on a deployment that went wrong.

=cut

package RlockTest::Sentinel;

use strict;
use warnings;

use File::Temp ();
use POSIX ();
use Time::HiRes qw(time usleep);
use RlockTest::ACL;
use RlockTest::Redis;
use RlockTest::TLS;
use RlockTest::Resp;

# Start the deployment; options: dir (for the servers' files and logs; a
# temporary one by default), replicas (2), sentinels (3), master_name
# ('main'), data_password and sentinel_password (none), down_after_ms
# (1000), failover_timeout_ms (5000), args (extra command line arguments
# for every data node), tls (everything speaks TLS: the data nodes, the
# Sentinels, and between them; on by default when the whole suite runs
# over TLS), acl (default: when the whole suite runs as the documented
# users): the data nodes and the Sentinels hold rlock's users as
# doc/configuration.md makes them (RlockTest::ACL, required and optional
# lines; a Sentinel keeps its user in the configuration file it rewrites).
# Returns once every replica is in sync and every Sentinel
# names the primary and knows the replicas and its peers.
#
# With tls, every server keeps a plain port for the tests' own commands;
# the Sentinels and the replicas announce their TLS ports, so every
# address a Sentinel gives out is a TLS one (port: see rlock_port in
# RlockTest::Redis).
sub start
{
	my ($class, %opt) = @_;
	my $self = bless {
		name => $opt{master_name} // 'main',
		data_pw => $opt{data_password},
		sentinel_pw => $opt{sentinel_password},
		down_after => $opt{down_after_ms} // 1000,
		failover_timeout => $opt{failover_timeout_ms} // 5000,
		dir => $opt{dir} // File::Temp::tempdir(CLEANUP => 1),
		args => $opt{args} // [],
		tls => $opt{tls} // RlockTest::TLS::everywhere(),
		acl => $opt{acl} // RlockTest::ACL::everywhere(),
		nodes => [],
		sentinels => [],
	}, $class;
	my $primary = $self->_start_data(undef);
	push @{ $self->{nodes} }, $primary;
	push @{ $self->{nodes} }, $self->_start_data($primary)
	  for 1 .. ($opt{replicas} // 2);
	# Sentinel learns the replicas from the primary's INFO: a replica
	# still syncing may be missing from it, or listed without an offset.
	$self->wait_synced($_, 20)
	  or die 'replica on port ' . $_->port . ' did not sync'
	  for @{ $self->{nodes} }[ 1 .. $#{ $self->{nodes} } ];

	my $n = $opt{sentinels} // 3;
	# a majority: no failover unless most Sentinels see the primary down
	$self->{quorum} = int($n / 2) + 1;
	for my $i (0 .. $n - 1)
	{
		my $port = RlockTest::free_port();
		my $tls_port = $self->{tls} ? RlockTest::free_port() : undef;
		# Sentinel rewrites its own configuration file (peers, replicas,
		# epochs, its id): start_sentinel after a stop reuses all that.
		my $conf = "$self->{dir}/sentinel$i.conf";
		open(my $fh, '>', $conf) or die "$conf: $!";
		print $fh join("\n",
			"port $port", 'bind 127.0.0.1', "dir $self->{dir}",
			$self->_sentinel_tls_conf($tls_port),
			(defined $self->{sentinel_pw}
				? "requirepass $self->{sentinel_pw}" : ()),
			($self->{acl}
				? RlockTest::ACL::config_line(
					(RlockTest::ACL::lines('sentinel'))[ 0, 1 ])
				: ()),
			"sentinel monitor $self->{name} 127.0.0.1 "
			  . $primary->rlock_port . " $self->{quorum}",
			(defined $self->{data_pw}
				? "sentinel auth-pass $self->{name} $self->{data_pw}" : ()),
			"sentinel down-after-milliseconds $self->{name} $self->{down_after}",
			"sentinel failover-timeout $self->{name} $self->{failover_timeout}",
			"sentinel parallel-syncs $self->{name} 1", '');
		close $fh;
		push @{ $self->{sentinels} },
		  { port => $port, tls_port => $tls_port, conf => $conf };
		$self->start_sentinel($i);
	}
	# Sentinels find each other through hello messages published on the
	# data nodes every 2 s: a failover asked for before they have would
	# find no quorum.
	my $others = $n - 1;
	my $nrep = scalar(@{ $self->{nodes} }) - 1;
	for my $i (0 .. $n - 1)
	{
		RlockTest::wait_until(
			sub {
				my $port = $self->_named_port($i);
				my $s = eval {
					$self->sentinel_cmd($i, 'SENTINEL', 'SENTINELS',
						$self->{name});
				};
				my $r = eval {
					$self->sentinel_cmd($i, 'SENTINEL', 'REPLICAS',
						$self->{name});
				};
				return defined $port && $port == $primary->rlock_port
				  && ref $s eq 'ARRAY' && @$s == $others
				  && ref $r eq 'ARRAY' && @$r == $nrep;
			},
			30)
		  or die "Sentinel $i did not learn the primary, its peers and the replicas";
	}
	return $self;
}

# A data node with the deployment's password and arguments: a replica of
# $primary, or a primary when that is undef.
sub _start_data
{
	my ($self, $primary) = @_;
	my $dir = "$self->{dir}/data" . scalar(@{ $self->{nodes} });
	mkdir $dir;
	return RlockTest::Redis->start(
		tls => $self->{tls},
		acl => $self->{acl} ? 'data' : 0,
		args => [ $self->_data_args($primary) ],
		password => $self->{data_pw},
		dir => $dir);
}

sub _data_args
{
	my ($self, $primary) = @_;
	# --masterauth on the primary too: Sentinel may make it a replica
	return (
		(defined $self->{data_pw}
			? ('--requirepass', $self->{data_pw},
				'--masterauth', $self->{data_pw})
			: ()),
		($self->{tls} ? ('--tls-replication', 'yes') : ()),
		@{ $self->{args} },
		($primary ? ('--replicaof', '127.0.0.1', $primary->rlock_port) : ()));
}

# A Sentinel's configuration lines for TLS: it listens on $tls_port too,
# reaches the data nodes and its peers over TLS, and tells its peers (and
# so SENTINEL SENTINELS) its TLS port.
sub _sentinel_tls_conf
{
	my ($self, $tls_port) = @_;
	return () unless $self->{tls};
	my $certs = RlockTest::TLS::certs();
	return (
		"tls-port $tls_port",
		"tls-cert-file $certs->{server_crt}",
		"tls-key-file $certs->{server_key}",
		"tls-ca-cert-file $certs->{ca}",
		'tls-auth-clients no',
		'tls-replication yes');
}

sub master_name { $_[0]{name} }

# The Sentinels' ports for rlock (the TLS ones with tls), in order.
sub sentinel_ports
{
	return map { $_->{tls_port} // $_->{port} } @{ $_[0]{sentinels} };
}

# The Sentinels' plain ports, in order.
sub sentinel_plain_ports { map { $_->{port} } @{ $_[0]{sentinels} } }

# The data nodes (RlockTest::Redis), as an array reference; the first is
# the primary the deployment started with.
sub data_nodes { $_[0]{nodes} }

# rlock.nodes for the Sentinels, in order
sub nodes_setting
{
	return join(',', map { "127.0.0.1:$_" } $_[0]->sentinel_ports);
}

# Run a command on Sentinel $i (authenticated) on a connection of its
# own; dies if it is not up.
sub sentinel_cmd
{
	my ($self, $i, @args) = @_;
	my $conn = RlockTest::Resp->connect($self->{sentinels}[$i]{port});
	if (defined $self->{sentinel_pw})
	{
		my $ok = $conn->call('AUTH', $self->{sentinel_pw});
		die "Sentinel $i refused AUTH: $ok->{error}\n" if ref $ok eq 'HASH';
	}
	return $conn->call(@args);
}

# The port Sentinel $i names as the primary, or undef.
sub _named_port
{
	my ($self, $i) = @_;
	my $a = eval {
		$self->sentinel_cmd($i, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME',
			$self->{name});
	};
	return ref $a eq 'ARRAY' ? $a->[1] : undef;
}

# The Sentinels that run and are not frozen (a frozen one accepts a
# connection but would keep a command waiting until the client's timeout).
sub _live
{
	my ($self) = @_;
	return grep {
		$self->{sentinels}[$_]{pid} && !$self->{sentinels}[$_]{frozen}
	} 0 .. $#{ $self->{sentinels} };
}

sub _node_by_port
{
	my ($self, $port) = @_;
	my ($node) = grep { $_->rlock_port == $port } @{ $self->{nodes} };
	return $node;
}

# The data node the Sentinels name as the primary now (the first live
# Sentinel that answers decides).
sub primary
{
	my ($self) = @_;
	for my $i ($self->_live)
	{
		my $port = $self->_named_port($i);
		return $self->_node_by_port($port) if defined $port;
	}
	die 'no Sentinel names a primary';
}

# The data nodes other than the primary.
sub replicas_now
{
	my ($self) = @_;
	my $p = $self->primary;
	return grep { $_ != $p } @{ $self->{nodes} };
}

# Start Sentinel $i (again: same port, same configuration file, which it
# rewrote with what it had learnt).
sub start_sentinel
{
	my ($self, $i) = @_;
	my $s = $self->{sentinels}[$i];
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', "$self->{dir}/sentinel$i.log");
		open(STDERR, '>&', \*STDOUT);
		exec('redis-sentinel', $s->{conf}) or POSIX::_exit(1);
	}
	$s->{pid} = $pid;
	$s->{frozen} = 0;
	RlockTest::wait_until(sub { eval { $self->sentinel_cmd($i, 'PING'); 1 } },
		10)
	  or die "Sentinel $i did not start (see $self->{dir}/sentinel$i.log)";
}

sub stop_sentinel
{
	my ($self, $i) = @_;
	my $s = $self->{sentinels}[$i];
	return unless $s->{pid};
	kill 'CONT', $s->{pid};
	kill 'TERM', $s->{pid};
	unless (RlockTest::wait_until(
			sub { waitpid($s->{pid}, POSIX::WNOHANG()) != 0 }, 5))
	{
		kill 'KILL', $s->{pid};
		waitpid($s->{pid}, 0);
	}
	delete $s->{pid};
	$s->{frozen} = 0;
}

# SIGKILL Sentinel $i: it gets no chance to say goodbye or save anything.
sub kill_sentinel
{
	my ($self, $i) = @_;
	my $s = $self->{sentinels}[$i];
	return unless $s->{pid};
	kill 'KILL', $s->{pid};
	waitpid($s->{pid}, 0);
	delete $s->{pid};
	$s->{frozen} = 0;
}

# Freeze and thaw Sentinel $i (SIGSTOP / SIGCONT): it keeps its socket
# but answers nothing, and misses what the others decide meanwhile.
sub sentinel_freeze
{
	my ($self, $i) = @_;
	kill 'STOP', $self->{sentinels}[$i]{pid};
	$self->{sentinels}[$i]{frozen} = 1;
}

sub sentinel_thaw
{
	my ($self, $i) = @_;
	kill 'CONT', $self->{sentinels}[$i]{pid};
	$self->{sentinels}[$i]{frozen} = 0;
}

# Wait until every live Sentinel names a primary other than port $old,
# that node says it is one (ROLE), and every live Sentinel has heard it
# answer since the switch (_settled); returns it.  Dies after $timeout
# seconds (30).  Should the Sentinels switch again meanwhile, this waits
# for the last primary.  The Sentinel that led the failover names the new
# primary at once but switches itself only when the other replicas follow
# it, or failover_timeout_ms has passed: a replica that needs a full sync
# takes the primary's repl-diskless-sync-delay (5 s) or more, and so does
# this wait.
sub wait_switch
{
	my ($self, $old, $timeout) = @_;
	my ($new, $seen);
	RlockTest::wait_until(
		sub {
			my @live = $self->_live;
			my %named =
			  map { ($self->_named_port($_) // 'none') => 1 } @live;
			my @ports = keys %named;
			$seen = join(',', sort @ports);
			return 0
			  unless @ports == 1 && $ports[0] ne 'none' && $ports[0] != $old;
			$new = $self->_node_by_port($ports[0]);
			return 0 unless $new;
			my $role = eval { $new->cmd('ROLE') };
			return 0 unless ref $role eq 'ARRAY' && $role->[0] eq 'master';
			for my $i (@live)
			{
				return 0 unless $self->_settled($i, $new->rlock_port);
			}
			return 1;
		},
		$timeout // 30)
	  or die sprintf(
		"the Sentinels did not switch away from port %s within %.0f s (they name: %s)",
		$old, $timeout // 30, $seen // '');
	return $new;
}

# Has Sentinel $i, which names port $port as the primary, heard it answer
# a PING since it switched to it?  At the switch a Sentinel resets its
# link to the primary and starts the down-after clock, but reconnects at
# most once a second; when the old primary was dead or frozen, it had
# just tried to reconnect to it, so with down_after_ms 1000 the new
# primary can be marked down before it is even asked (3 times in 60
# killed primaries here).  The other Sentinels' "down" answers about the
# old primary still count for a few seconds, so that one Sentinel sees a
# quorum at once and fails over again: the primary just returned would
# be demoted two seconds later.  Past the first answer on the new link (no flag but
# "master": not "disconnected", which the reset sets; no PING pending,
# which the reset also starts) that race is over.
sub _settled
{
	my ($self, $i, $port) = @_;
	my $m = eval {
		$self->sentinel_cmd($i, 'SENTINEL', 'MASTER', $self->{name});
	};
	return 0 unless ref $m eq 'ARRAY';
	my %m = @$m;
	return $m{port} == $port
	  && $m{flags} eq 'master'
	  && $m{'last-ping-sent'} == 0;
}

# SENTINEL FAILOVER on a live Sentinel; returns the new primary once every
# live Sentinel names it and it says it is one (wait_switch).  Option
# timeout (30 s).
# The old primary stays a primary for up to about 10 s more, until the
# Sentinels convert it (wait_converted).
sub failover
{
	my ($self, %opt) = @_;
	my $timeout = $opt{timeout} // 30;
	my $deadline = time + $timeout;
	my $old = $self->primary;
	my ($i) = $self->_live;
	die 'no live Sentinel to ask for a failover' unless defined $i;
	# NOGOODSLAVE: no replica qualifies yet (one just restarted, or its
	# INFO is not fresh); it will soon, so ask again within the bound.
	# Anything else (INPROG: a failover already runs) is the caller's
	# business.
	while (1)
	{
		my $r =
		  $self->sentinel_cmd($i, 'SENTINEL', 'FAILOVER', $self->{name});
		last unless ref $r eq 'HASH';
		die "SENTINEL FAILOVER refused: $r->{error}"
		  unless $r->{error} =~ /^NOGOODSLAVE/ && time < $deadline;
		usleep(200_000);
	}
	my $left = $deadline - time;
	return $self->wait_switch($old->rlock_port, $left > 1 ? $left : 1);
}

# SIGKILL the primary and wait until the Sentinels have promoted another
# node (option timeout, 30 s: down_after_ms, the vote and the promotion);
# returns the new primary.  The killed node stays down: restart_node.
sub kill_primary
{
	my ($self, %opt) = @_;
	my $old = $self->primary;
	$old->kill9;
	return $self->wait_switch($old->rlock_port, $opt{timeout} // 30);
}

# Start data node $node again, empty, on its port, as a replica of the
# current primary, and wait (bound $timeout, 30 s) until it is in sync
# and every live Sentinel lists it as a replica that is up.  As a primary
# it would come back empty and take writes until the Sentinels convert it.
sub restart_node
{
	my ($self, $node, $timeout) = @_;
	$timeout //= 30;
	my $primary = $self->primary;
	die 'the Sentinels still name port ' . $node->port
	  . ' the primary: wait for a switch first'
	  if $primary == $node;
	# RlockTest::Redis restarts with the arguments it was started with
	# (TLS ones included); only the primary to follow has to change.
	my @args = @{ $node->{args} };
	my @keep;
	while (@args)
	{
		my $arg = shift @args;
		if ($arg eq '--replicaof') { splice(@args, 0, 2); next; }
		push @keep, $arg;
	}
	$node->{args} = [ @keep, '--replicaof', '127.0.0.1', $primary->rlock_port ];
	$node->restart;
	$self->wait_synced($node, $timeout)
	  or die 'restarted node on port ' . $node->port . ' did not sync';
	# until its PINGs are answered again a Sentinel keeps it s_down, and
	# would not pick it in a failover
	RlockTest::wait_until(
		sub {
			for my $i ($self->_live)
			{
				my $flags = $self->_replica_flags($i, $node->rlock_port);
				return 0 unless defined $flags && $flags eq 'slave';
			}
			return 1;
		},
		$timeout)
	  or die 'the Sentinels did not see port ' . $node->port . ' back up';
	return $node;
}

# The flags Sentinel $i shows for replica port $port ("slave" when it is
# well; "s_down", "disconnected" ... added), or undef if it lists none.
sub _replica_flags
{
	my ($self, $i, $port) = @_;
	my $r = eval {
		$self->sentinel_cmd($i, 'SENTINEL', 'REPLICAS', $self->{name});
	};
	return undef unless ref $r eq 'ARRAY';
	for my $entry (@$r)
	{
		my %f = @$entry;
		return $f{flags} if $f{port} == $port;
	}
	return undef;
}

# Wait until data node $node says it is a replica (ROLE "slave"); true if
# it did within $timeout seconds (30).  It stops being a primary then,
# but still has its data until its sync with the new primary ends
# (wait_synced).
sub wait_converted
{
	my ($self, $node, $timeout) = @_;
	return RlockTest::wait_until(
		sub {
			my $role = eval { $node->cmd('ROLE') };
			ref $role eq 'ARRAY' && $role->[0] eq 'slave';
		},
		$timeout // 30);
}

# Wait until replica $node has its link to its primary up (its first
# sync done: its data is the primary's); true if it did within $timeout
# seconds (30).
sub wait_synced
{
	my ($self, $node, $timeout) = @_;
	return RlockTest::wait_until(
		sub {
			my $info = eval { $node->cmd('INFO', 'replication') } // '';
			$info =~ /^role:slave\r?$/m
			  && $info =~ /^master_link_status:up\r?$/m;
		},
		$timeout // 30);
}

# From now on writes to the primary reach no replica (until
# lose_writes_finish):
# - the replicas are frozen first, so none can reconnect and resync;
# - then the primary closes its links to them: a write made after this
#   has no link to go out on.  Freezing alone is not enough on loopback: a
#   write lands in the frozen replica's socket buffer and is applied when
#   it is thawed.  What was in those buffers before the kill predates the
#   call, and may still arrive.
sub lose_writes_setup
{
	my ($self) = @_;
	my $p = $self->primary;
	$self->{losing} = $p;
	my @replicas = grep { $_ != $p } @{ $self->{nodes} };
	$_->freeze for @replicas;
	$p->cmd('CLIENT', 'KILL', 'TYPE', 'replica');
	$self->{frozen_replicas} = \@replicas;
}

# End what lose_writes_setup began; returns the new primary.
# - The primary is frozen before the replicas are thawed: they find their
#   link closed, and cannot fetch the missing writes from it.
# - The Sentinels see it down after down_after_ms and promote one of the
#   replicas, which never had those writes (option timeout, 30 s: a first
#   attempt may find no replica fit yet, just thawed, and the next comes
#   only after twice failover_timeout_ms).
# - The old primary is thawed: it still says it is the primary, with the
#   writes, until the Sentinels convert it (about 10 s); we wait for that.
#   With option synced, also until its sync with the new primary is over:
#   only then are the writes gone from it too.
sub lose_writes_finish
{
	my ($self, %opt) = @_;
	my $timeout = $opt{timeout} // 30;
	my $old = $self->{losing} or die 'lose_writes_setup was not called';
	$old->freeze;
	$_->thaw for @{ $self->{frozen_replicas} };
	my $new = $self->wait_switch($old->rlock_port, $timeout);
	$old->thaw;
	$self->wait_converted($old, $timeout)
	  or die 'the old primary was not converted to a replica';
	if ($opt{synced})
	{
		$self->wait_synced($old, $timeout)
		  or die 'the old primary did not sync with the new one';
	}
	delete $self->{losing};
	delete $self->{frozen_replicas};
	return $new;
}

# Stop the Sentinels first (so they do not fail over while the data nodes
# go), then the data nodes; each is killed if it does not end within 5 s.
sub stop
{
	my ($self) = @_;
	$self->stop_sentinel($_) for 0 .. $#{ $self->{sentinels} // [] };
	$_->stop for @{ $self->{nodes} // [] };
}

sub DESTROY
{
	my ($self) = @_;
	local $?;
	$self->stop;
}

1;
