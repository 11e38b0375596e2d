
=pod

=head1 NAME

RlockTest::Cluster - a throw-away Redis Cluster on loopback ports for
rlock's tests: primaries with a replica each, made with redis-cli --cluster
create, and what tests do to it

=head1 SYNOPSIS

  my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
  my @p = $cluster->primaries;              # RlockTest::Redis, by port
  my $node = $cluster->owner(1711);         # the primary serving slot 1711
  my $slot = $cluster->slot('mylock');      # CLUSTER KEYSLOT
  $cluster->migrate_slot($slot, $p[2]);     # or begin, keys, end
  my $new = $cluster->failover($p[0]);      # CLUSTER FAILOVER on its replica
  $new = $cluster->kill_primary($p[1]);     # SIGKILL, wait for promotion
  my $b = $cluster->add_primary(cert => $c); # CLUSTER MEET a new node
  $cluster->stop;

Every wait is bounded and dies when the bound passes.

=cut

package RlockTest::Cluster;

use strict;
use warnings;

use File::Temp ();
use IO::Socket::INET;
use IPC::Run ();
use RlockTest::ACL;
use RlockTest::Redis;
use RlockTest::TLS;

# Start the cluster; options: primaries (3), replicas per primary (1),
# node_timeout_ms (2000), dir (for the servers' files), tls (default: when
# the whole suite runs over TLS): every node also listens for TLS, and the
# cluster speaks TLS among itself and to its clients (tls-cluster,
# tls-replication), so that the map and the redirections name TLS ports;
# the plain ports stay open for the tests' own client; node_cert (with
# tls): a function of the node's number (1, 2, ...) returning the
# certificate it serves (RlockTest::TLS::server_cert), rather than the
# shared one; acl (default: when the whole suite runs as the documented
# users): every node holds rlock's user as doc/configuration.md makes it
# for a cluster (RlockTest::ACL, required and optional lines).  Returns
# once every node says the cluster is ok and knows every other node, and
# every replica is in sync.
sub start
{
	my ($class, %opt) = @_;
	my $self = bless {
		dir => $opt{dir} // File::Temp::tempdir(CLEANUP => 1),
		nodes => [],
		tls => $opt{tls} // RlockTest::TLS::everywhere(),
		node_timeout_ms => $opt{node_timeout_ms} // 2000,
		acl => $opt{acl} // RlockTest::ACL::everywhere(),
	}, $class;
	my $certs = $self->{tls} ? RlockTest::TLS::certs() : undef;
	my $n = ($opt{primaries} // 3) * (1 + ($opt{replicas} // 1));
	for my $i (1 .. $n)
	{
		push @{ $self->{nodes} }, $self->_start_node($i,
			$opt{node_cert} ? $opt{node_cert}->($i) : undef);
	}
	my $log = '';
	IPC::Run::run(
		[ 'redis-cli',
		  ($self->{tls} ? ('--tls', '--cacert', $certs->{ca}) : ()),
		  '--cluster', 'create',
		  (map { '127.0.0.1:' . $self->cport($_) } @{ $self->{nodes} }),
		  '--cluster-replicas', $opt{replicas} // 1, '--cluster-yes' ],
		'<', \undef, '>&', \$log)
	  or die "redis-cli --cluster create failed:\n$log";
	$self->{replicas} = ($opt{primaries} // 3) * ($opt{replicas} // 1);
	$self->wait_ok(30)
	  or die "the cluster did not come up:\n$log";
	return $self;
}

# A data node numbered $i, serving certificate $cert (undef: the shared
# one) when the cluster speaks TLS; not yet part of the cluster.
sub _start_node
{
	my ($self, $i, $cert) = @_;
	my $dir = "$self->{dir}/node$i";
	mkdir $dir;
	return RlockTest::Redis->start(
		port => $self->free_port_pair,
		dir => $dir,
		tls => $self->{tls} ? ($cert ? { cert => $cert } : 1) : 0,
		acl => $self->{acl} ? 'cluster' : 0,
		($self->{tls}
			? (tls_port => $self->free_port_pair) : ()),
		args => [
			($self->{tls}
				? ('--tls-cluster', 'yes', '--tls-replication', 'yes') : ()),
			'--cluster-enabled', 'yes',
			'--cluster-config-file', "$dir/nodes.conf",
			'--cluster-node-timeout', $self->{node_timeout_ms},
			'--repl-diskless-sync-delay', '0' ]);
}

# One more primary, serving no slot: a new node (with certificate $opt{cert}
# in a TLS cluster, see start) that a node of the cluster meets (CLUSTER
# MEET), as anyone allowed that command can add one.  Returns it
# (RlockTest::Redis) once every node knows every other and the cluster is
# ok; migrate_slot can then give it slots.
sub add_primary
{
	my ($self, %opt) = @_;
	my $node = $self->_start_node(scalar(@{ $self->{nodes} }) + 1, $opt{cert});
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	my $r = $any->cmd('CLUSTER', 'MEET', '127.0.0.1', $self->cport($node));
	die "CLUSTER MEET: $r->{error}" if ref $r eq 'HASH';
	push @{ $self->{nodes} }, $node;
	$self->wait_ok(30) or die 'the cluster did not take in the new node';
	return $node;
}

# A port for a cluster node: free, and so is the port 10000 above it
# (the cluster bus), which must stay below 65536; called on a cluster,
# not one taken by it already, either way.  Also a class method.
sub free_port_pair
{
	my ($self) = @_;
	my $taken = ref $self ? ($self->{taken} //= {}) : {};
	for (1 .. 1000)
	{
		my $port = 20000 + int(rand(20000));
		next if grep { $taken->{$_} } ($port, $port + 10000, $port - 10000);
		my @socks;
		for my $p ($port, $port + 10000)
		{
			my $sock = IO::Socket::INET->new(
				Listen => 1,
				LocalAddr => '127.0.0.1',
				LocalPort => $p,
				ReuseAddr => 1,
				Proto => 'tcp') or last;
			push @socks, $sock;
		}
		next unless @socks == 2;
		close $_ for @socks;
		$taken->{$port} = $taken->{ $port + 10000 } = 1;
		return $port;
	}
	die 'no free pair of ports for a cluster node';
}

# All data nodes (RlockTest::Redis).
sub nodes { @{ $_[0]{nodes} } }

# The port nodes of the cluster reach a node by (MIGRATE, the bus): the
# TLS one in a TLS cluster.  The tests' own plain client is told plain
# ports (CLUSTER NODES, redirections), rlock over TLS the TLS ones.
sub cport
{
	my ($self, $node) = @_;
	return $self->{tls} ? $node->tls_port : $node->port;
}

sub _node_by_port
{
	my ($self, $port) = @_;
	my ($node) = grep { $_->port == $port || ($_->tls_port // 0) == $port }
	  @{ $self->{nodes} };
	return $node;
}

# The nodes as one of them sees them: { port => { id, role, flags,
# master_id, slots => [[start, end], ...] } } from CLUSTER NODES.
sub view
{
	my ($self, $node) = @_;
	my $text = $node->cmd('CLUSTER', 'NODES');
	die 'CLUSTER NODES: ' . ($text->{error} // 'no answer')
	  unless defined $text && !ref $text;
	my %view;
	for my $line (split /\n/, $text)
	{
		my ($id, $addr, $flags, $master, undef, undef, undef, $link, @slots) =
		  split / /, $line;
		my ($port) = $addr =~ /:(\d+)/;
		$view{$port} = {
			id => $id,
			flags => $flags,
			role => ($flags =~ /master/ ? 'master' : 'replica'),
			master_id => $master,
			link => $link,
			slots => [ map { /^(\d+)(?:-(\d+))?$/ ? [ $1, $2 // $1 ] : () } @slots ],
		};
	}
	return \%view;
}

# Wait until every live node says cluster_state:ok, knows every node as
# connected and without failure flags, and every replica has its link up;
# true if that happened within $timeout seconds.
sub wait_ok
{
	my ($self, $timeout) = @_;
	my @live = grep { $_->pid } @{ $self->{nodes} };
	return RlockTest::wait_until(
		sub {
			for my $node (@live)
			{
				my $info = eval { $node->cmd('CLUSTER', 'INFO') } // '';
				return 0 unless $info =~ /^cluster_state:ok/m;
				my $view = eval { $self->view($node) } or return 0;
				return 0 unless keys %$view >= @live;
				# the replicas redis-cli assigned are known as such
				return 0
				  if defined $self->{replicas}
				  && (grep { $_->{flags} =~ /slave/ } values %$view)
				  < $self->{replicas};
				for my $n (@live)
				{
					my $v = $view->{ $n->port } or return 0;
					return 0 if $v->{flags} =~ /fail|handshake|noaddr/
					  || $v->{link} ne 'connected';
				}
				my $repl = eval { $node->cmd('INFO', 'replication') } // '';
				return 0
				  if $repl =~ /^role:slave/m
				  && $repl !~ /^master_link_status:up/m;
			}
			return 1;
		},
		$timeout // 30);
}

# The primaries now (RlockTest::Redis), ordered by their first slot.
sub primaries
{
	my ($self) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	my $view = $self->view($any);
	my @p = grep { $view->{$_}{role} eq 'master' && @{ $view->{$_}{slots} } }
	  keys %$view;
	@p = sort { $view->{$a}{slots}[0][0] <=> $view->{$b}{slots}[0][0] } @p;
	return map { $self->_node_by_port($_) } @p;
}

# The primary serving slot $slot now, as a live node sees it.
sub owner
{
	my ($self, $slot) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	my $view = $self->view($any);
	for my $port (keys %$view)
	{
		next unless $view->{$port}{role} eq 'master';
		return $self->_node_by_port($port)
		  if grep { $slot >= $_->[0] && $slot <= $_->[1] }
		  @{ $view->{$port}{slots} };
	}
	return undef;
}

# The slot of $key, as Redis computes it.
sub slot
{
	my ($self, $key) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	return $any->cmd('CLUSTER', 'KEYSLOT', $key);
}

# The node id of data node $node.
sub id_of
{
	my ($self, $node) = @_;
	return $node->cmd('CLUSTER', 'MYID');
}

# Moving slot $slot from its primary to primary $to, in three steps a
# test can act between: migrate_begin marks the slot (IMPORTING on $to,
# MIGRATING on the owner: from now on the owner answers ASK for keys it
# no longer has), migrate_keys moves its keys (all, or at most
# $opt{count}), migrate_end gives the slot to $to on every primary (the
# owner answers MOVED from then on).  migrate_slot does all three.
sub migrate_begin
{
	my ($self, $slot, $to) = @_;
	my $from = $self->owner($slot);
	die "slot $slot has no owner" unless $from;
	die "slot $slot is already on port " . $self->cport($to) if $from == $to;
	my $r = $to->cmd('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $self->id_of($from));
	die "SETSLOT IMPORTING: $r->{error}" if ref $r eq 'HASH';
	$r = $from->cmd('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $self->id_of($to));
	die "SETSLOT MIGRATING: $r->{error}" if ref $r eq 'HASH';
	$self->{migrating}{$slot} = [ $from, $to ];
	return $from;
}

sub migrate_keys
{
	my ($self, $slot, %opt) = @_;
	my ($from, $to) = @{ $self->{migrating}{$slot} or die "slot $slot is not migrating" };
	my $left = $opt{count} // 1e9;
	while ($left > 0)
	{
		my $keys = $from->cmd('CLUSTER', 'GETKEYSINSLOT', $slot,
			$left < 100 ? $left : 100);
		last unless ref $keys eq 'ARRAY' && @$keys;
		my $r = $from->cmd('MIGRATE', '127.0.0.1', $self->cport($to), '', 0, 5000,
			'KEYS', @$keys);
		die "MIGRATE: $r->{error}" if ref $r eq 'HASH';
		$left -= @$keys;
	}
}

sub migrate_end
{
	my ($self, $slot) = @_;
	my ($from, $to) = @{ delete $self->{migrating}{$slot} or die "slot $slot is not migrating" };
	my $id = $self->id_of($to);
	# the new owner first, then the old one, then the rest
	for my $node ($to, $from, grep { $_ != $to && $_ != $from } $self->primaries)
	{
		my $r = $node->cmd('CLUSTER', 'SETSLOT', $slot, 'NODE', $id);
		die "SETSLOT NODE: $r->{error}" if ref $r eq 'HASH';
	}
	RlockTest::wait_until(
		sub {
			for my $node (grep { $_->pid } @{ $self->{nodes} })
			{
				my $view = eval { $self->view($node) } or return 0;
				my $v = $view->{ $to->port } or return 0;
				return 0
				  unless grep { $slot >= $_->[0] && $slot <= $_->[1] } @{ $v->{slots} };
			}
			return 1;
		},
		30)
	  or die "not every node learnt that slot $slot moved";
}

sub migrate_slot
{
	my ($self, $slot, $to) = @_;
	$self->migrate_begin($slot, $to);
	$self->migrate_keys($slot);
	$self->migrate_end($slot);
}

# The replica of primary $primary (RlockTest::Redis), or undef.
sub replica_of
{
	my ($self, $primary) = @_;
	my $id = $self->id_of($primary);
	my $view = $self->view($primary);
	for my $port (keys %$view)
	{
		my $node = $self->_node_by_port($port);
		return $node
		  if $view->{$port}{master_id} eq $id && $node && $node->pid
		  && $view->{$port}{flags} !~ /fail/;
	}
	return undef;
}

# CLUSTER FAILOVER on the replica of $primary: it takes over without
# losing a write.  Returns the new primary once every node sees it so
# and the cluster is ok (bound $timeout, 30 s).
sub failover
{
	my ($self, $primary, $timeout) = @_;
	my $replica = $self->replica_of($primary) or die 'no replica to fail over to';
	my $r = $replica->cmd('CLUSTER', 'FAILOVER');
	die "CLUSTER FAILOVER: $r->{error}" if ref $r eq 'HASH';
	$self->_wait_promoted($replica, $timeout);
	return $replica;
}

# SIGKILL $primary; returns its replica once the cluster promoted it
# (after cluster-node-timeout) and is ok again without it.
sub kill_primary
{
	my ($self, $primary, $timeout) = @_;
	my $replica = $self->replica_of($primary) or die 'no replica to promote';
	$primary->kill9;
	$self->_wait_promoted($replica, $timeout);
	return $replica;
}

sub _wait_promoted
{
	my ($self, $node, $timeout) = @_;
	RlockTest::wait_until(
		sub {
			for my $other (grep { $_->pid } @{ $self->{nodes} })
			{
				my $view = eval { $self->view($other) } or return 0;
				my $v = $view->{ $node->port } or return 0;
				return 0 unless $v->{role} eq 'master' && @{ $v->{slots} };
				my $info = eval { $other->cmd('CLUSTER', 'INFO') } // '';
				return 0 unless $info =~ /^cluster_state:ok/m;
			}
			return 1;
		},
		$timeout // 30)
	  or die 'the cluster did not promote port ' . $self->cport($node);
}

sub stop
{
	my ($self) = @_;
	$_->stop for @{ $self->{nodes} };
}

1;
